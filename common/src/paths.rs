//! Finding executables: the one PATH lookup of the workspace.

use std::ffi::OsStr;
use std::path::PathBuf;

/// `name` in the first directory of `$PATH` that has a file by that name (as a shell finds a
/// command, without checking the execute bit: a file that is not executable fails loudly when run).
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    find_in(name, &std::env::var_os("PATH")?)
}

/// `name` in the first directory of `path_list` (PATH syntax) that has a file by that name.
fn find_in(name: &str, path_list: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path_list)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_directory_with_a_file_of_that_name_wins() {
        let root = tempfile::tempdir().unwrap();
        let [empty, a_dir, first, second] =
            ["empty", "a-dir", "first", "second"].map(|d| root.path().join(d));
        for d in [&empty, &a_dir, &first, &second] {
            std::fs::create_dir(d).unwrap();
        }
        // A directory named like the tool is not the tool.
        std::fs::create_dir(a_dir.join("tool")).unwrap();
        std::fs::write(first.join("tool"), "").unwrap();
        std::fs::write(second.join("tool"), "").unwrap();
        let path_list = std::env::join_paths([&empty, &a_dir, &first, &second]).unwrap();

        assert_eq!(find_in("tool", &path_list), Some(first.join("tool")));
        assert_eq!(find_in("other", &path_list), None);
        assert_eq!(find_in("tool", OsStr::new("")), None);
    }
}
