-- A failure's forensics (JSON of status::Forensics: the test's requests on the wire, the
-- previous use of its correlation id); NULL for failures without.
ALTER TABLE failures ADD COLUMN forensics TEXT;
