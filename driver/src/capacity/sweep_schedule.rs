//! Which variants a sweep starts next (pure): up to `parallel` measured at once. The grid starts
//! its variants in grid order; the quick search starts the points of its current wave (the
//! current point and its neighbours, [`quick_wave`]) and decides where to move only once all of
//! them are measured, so it decides exactly as it does one variant at a time. `crate::run`
//! feeds each measurement in and starts what this says.

use std::collections::{BTreeMap, BTreeSet};

use super::sweep::{Point, QuickWave, quick_wave};

/// What the sweep does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Start measuring these points (never empty), in this order.
    Start(Vec<Point>),
    /// Wait for a measurement in flight to end.
    Wait,
    /// Nothing is left to measure and nothing is in flight.
    Done,
}

/// How a sweep chooses its variants.
#[derive(Debug, Clone, PartialEq)]
pub enum Search {
    /// Every point of the grid, in grid order (the first parameter varies slowest).
    Grid,
    /// The hill climb of [`quick_wave`] from `start`.
    Quick {
        start: Point,
        /// A neighbour must serve more than `1 + spread` times the current point to move.
        spread: f64,
        /// The most points measured.
        budget: usize,
    },
}

/// A sweep's schedule: its parameters' lengths, its search and how many variants run at once.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Each parameter's number of values.
    pub lens: Vec<usize>,
    pub search: Search,
    /// Variants measured at once (at least 1).
    pub parallel: usize,
}

impl Schedule {
    /// What to do next, given the points measured (with their capacity, None: no answer) and
    /// those being measured.
    pub fn next(
        &self,
        measured: &BTreeMap<Point, Option<f64>>,
        in_flight: &BTreeSet<Point>,
    ) -> Next {
        let wanted: Vec<Point> = match &self.search {
            Search::Grid => grid_points(&self.lens),
            Search::Quick {
                start,
                spread,
                budget,
            } => {
                // Points in flight are unmeasured points of the current wave (the wave moves
                // only once all of its points are measured), and count against the budget.
                match quick_wave(&self.lens, start, measured, *spread, *budget) {
                    QuickWave::Measure(wave) => wave,
                    QuickWave::Done(_) => Vec::new(),
                }
            }
        };
        let room = self.parallel.max(1).saturating_sub(in_flight.len());
        let start: Vec<Point> = wanted
            .into_iter()
            .filter(|p| !measured.contains_key(p) && !in_flight.contains(p))
            .take(room)
            .collect();
        if !start.is_empty() {
            Next::Start(start)
        } else if !in_flight.is_empty() {
            Next::Wait
        } else {
            Next::Done
        }
    }
}

/// Every point of a grid of these lengths, in grid order (the first varies slowest).
pub fn grid_points(lens: &[usize]) -> Vec<Point> {
    let mut points: Vec<Point> = vec![Vec::new()];
    for &len in lens {
        points = points
            .into_iter()
            .flat_map(|p| {
                (0..len).map(move |i| {
                    let mut next = p.clone();
                    next.push(i);
                    next
                })
            })
            .collect();
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::sweep::{QuickStep, quick_step};

    /// Runs a schedule to its end over a capacity surface, ending the measurements in flight in
    /// the order `pick` chooses (an index into those in flight, by start order); returns every
    /// point in start order and the most measured at once.
    fn simulate(
        schedule: &Schedule,
        surface: impl Fn(&[usize]) -> Option<f64>,
        mut pick: impl FnMut(usize) -> usize,
    ) -> (Vec<Point>, usize) {
        let mut measured = BTreeMap::new();
        let mut in_flight: Vec<Point> = Vec::new();
        let mut started = Vec::new();
        let mut most = 0;
        loop {
            let set: BTreeSet<Point> = in_flight.iter().cloned().collect();
            match schedule.next(&measured, &set) {
                Next::Start(points) => {
                    assert!(!points.is_empty());
                    for p in points {
                        assert!(!started.contains(&p), "{p:?} started twice");
                        started.push(p.clone());
                        in_flight.push(p);
                    }
                    most = most.max(in_flight.len());
                    assert!(in_flight.len() <= schedule.parallel, "{in_flight:?}");
                }
                Next::Wait => {
                    let p = in_flight.remove(pick(in_flight.len()));
                    let q = surface(&p);
                    measured.insert(p, q);
                }
                Next::Done => {
                    assert!(in_flight.is_empty());
                    return (started, most);
                }
            }
        }
    }

    /// The sequential quick search: the points it measures, in order, and where it ends.
    fn sequential(
        lens: &[usize],
        start: &[usize],
        budget: usize,
        surface: impl Fn(&[usize]) -> Option<f64>,
    ) -> (Vec<Point>, Point) {
        let mut measured = BTreeMap::new();
        let mut order = Vec::new();
        loop {
            match quick_step(lens, start, &measured, 0.05, budget) {
                QuickStep::Measure(p) => {
                    order.push(p.clone());
                    let q = surface(&p);
                    measured.insert(p, q);
                }
                QuickStep::Done(p) => return (order, p),
            }
        }
    }

    #[test]
    fn the_grid_starts_every_variant_in_order_at_most_parallel_at_once() {
        for parallel in 1..=4 {
            let schedule = Schedule {
                lens: vec![3, 2],
                search: Search::Grid,
                parallel,
            };
            // The last started ends first: the order started stays the grid's.
            let (started, most) = simulate(&schedule, |_| Some(1.0), |n| n - 1);
            assert_eq!(started, grid_points(&[3, 2]));
            assert_eq!(most, parallel.min(6), "parallel {parallel}");
        }
        assert_eq!(
            grid_points(&[3, 2]),
            [[0, 0], [0, 1], [1, 0], [1, 1], [2, 0], [2, 1]]
        );
        // A full schedule waits; one with room starts the next points only.
        let schedule = Schedule {
            lens: vec![4],
            search: Search::Grid,
            parallel: 2,
        };
        let measured = BTreeMap::from([(vec![0], Some(1.0))]);
        let full = BTreeSet::from([vec![1], vec![2]]);
        assert_eq!(schedule.next(&measured, &full), Next::Wait);
        let one = BTreeSet::from([vec![1]]);
        assert_eq!(schedule.next(&measured, &one), Next::Start(vec![vec![2]]));
    }

    #[test]
    fn the_quick_search_in_parallel_measures_and_decides_as_it_does_alone() {
        let counts = [1.0, 2.0, 4.0, 8.0];
        let delays = [0.6, 1.0, 0.8, 0.5, 0.3];
        type Surface<'a> = Box<dyn Fn(&[usize]) -> Option<f64> + 'a>;
        let surfaces: [(&str, Surface); 3] = [
            (
                "peaked",
                Box::new(|p| Some(20.0 * counts[p[0]] * delays[p[1]])),
            ),
            (
                "with a hole",
                Box::new(|p| (p != [2, 1]).then(|| 20.0 * counts[p[0]] * delays[p[1]])),
            ),
            ("flat", Box::new(|p| Some(100.0 + p[0] as f64))),
        ];
        for (name, surface) in &surfaces {
            for start in [vec![0, 0], vec![1, 0], vec![0, 1], vec![2, 3]] {
                for budget in [2, 5, 64] {
                    let (order, end) = sequential(&[4, 5], &start, budget, surface);
                    for parallel in 1..=4 {
                        let schedule = Schedule {
                            lens: vec![4, 5],
                            search: Search::Quick {
                                start: start.clone(),
                                spread: 0.05,
                                budget,
                            },
                            parallel,
                        };
                        // Measurements ending in every order: first started, last started.
                        for first in [true, false] {
                            let pick = |n: usize| if first { 0 } else { n - 1 };
                            let (started, most) = simulate(&schedule, surface, pick);
                            let what = format!(
                                "{name}, start {start:?}, budget {budget}, parallel {parallel}"
                            );
                            // The same points (so the same answer: the best of them).
                            assert_eq!(started, order, "{what}");
                            assert!(most <= parallel, "{what}");
                            let measured: BTreeMap<Point, Option<f64>> =
                                started.iter().map(|p| (p.clone(), surface(p))).collect();
                            assert_eq!(
                                quick_wave(&[4, 5], &start, &measured, 0.05, budget),
                                QuickWave::Done(end.clone()),
                                "{what}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_quick_search_starts_a_point_and_its_neighbours_together() {
        let schedule = Schedule {
            lens: vec![3, 2],
            search: Search::Quick {
                start: vec![1, 0],
                spread: 0.05,
                budget: 64,
            },
            parallel: 4,
        };
        let none = BTreeMap::new();
        assert_eq!(
            schedule.next(&none, &BTreeSet::new()),
            Next::Start(vec![vec![1, 0], vec![0, 0], vec![2, 0], vec![1, 1]])
        );
        // Within the budget: two left, one in flight, so one more starts.
        let schedule = Schedule {
            search: Search::Quick {
                start: vec![1, 0],
                spread: 0.05,
                budget: 3,
            },
            ..schedule
        };
        let measured = BTreeMap::from([(vec![1, 0], Some(10.0))]);
        let in_flight = BTreeSet::from([vec![0, 0]]);
        assert_eq!(
            schedule.next(&measured, &in_flight),
            Next::Start(vec![vec![2, 0]])
        );
        let in_flight = BTreeSet::from([vec![0, 0], vec![2, 0]]);
        assert_eq!(schedule.next(&measured, &in_flight), Next::Wait);
        // The wave measured and no neighbour better: done.
        let measured = BTreeMap::from([
            (vec![1, 0], Some(10.0)),
            (vec![0, 0], Some(9.0)),
            (vec![2, 0], Some(10.2)),
        ]);
        assert_eq!(schedule.next(&measured, &BTreeSet::new()), Next::Done);
    }
}
