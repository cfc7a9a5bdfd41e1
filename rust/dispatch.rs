//! Dispatch: how many jobs to claim from which queue, and which jobs this
//! worker process holds.
//!
//! # Overview
//! The producer asks [`Dispatcher::plan_claim`] before every claim. The plan
//! reserves free slots, so several claims in flight can never overfill a
//! queue; [`Dispatcher::start`] turns one of the plan's reservations into a
//! running job and [`Dispatcher::settle_claim`] gives back what the
//! database did not return. [`Dispatcher::finish`] frees a slot when a
//! handler returns.
//!
//! # State model
//! Per queue: `running + reserved <= max_workers`, and the sum over queues
//! stays under the optional global cap. A queue whose last claim came back
//! short is marked empty and skipped until something says it may have work
//! again (a notification, a poll tick, or a retry scheduled by this worker).
//!
//! # Failure handling
//! A claim that fails must still be settled, so reservations never leak.
//! `finish` of an unknown job is ignored and reported, never a panic.

use std::collections::HashMap;

/// One queue this worker serves.
#[derive(Clone, Debug)]
pub struct QueueSlots {
    pub name: String,
    pub max_workers: u32,
    pub running: u32,
    pub reserved: u32,
    /// False after a short claim, until a wake-up says otherwise.
    maybe_has_jobs: bool,
    /// Counts wake-ups, so a claim that was already in flight when one came
    /// (its snapshot may predate the new job) cannot undo it.
    wake_ups: u64,
}

/// A job held by this worker: which queue's slot it takes, and its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub queue: usize,
    pub run_lease: i64,
}

#[derive(Debug)]
pub struct Dispatcher {
    queues: Vec<QueueSlots>,
    by_name: HashMap<String, usize>,
    held: HashMap<i64, Held>,
    claim_batch_max: u32,
    global_max: Option<u32>,
}

/// One claim's reservations: how many jobs of which queue, and how many of
/// them the database returned so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimPlan {
    pub wanted: Vec<(usize, u32)>,
    started: Vec<u32>,
    /// Each wanted queue's wake-up count when the plan was made.
    wake_ups: Vec<u64>,
}

impl ClaimPlan {
    fn take_slot(&mut self, queue: usize) -> bool {
        let Some(position) = self.wanted.iter().position(|&(index, _)| index == queue) else {
            return false;
        };
        if self.started[position] >= self.wanted[position].1 {
            return false;
        }
        self.started[position] += 1;
        true
    }
}

impl Dispatcher {
    /// `queues` pairs each queue name with its `max_workers` (at least 1).
    pub fn new(
        queues: Vec<(String, u32)>,
        claim_batch_max: u32,
        global_max: Option<u32>,
    ) -> Result<Self, String> {
        if queues.is_empty() {
            return Err("at least one queue is needed".into());
        }
        if claim_batch_max == 0 {
            return Err("claim_batch_max must be at least 1".into());
        }
        if global_max == Some(0) {
            return Err("global_max_workers must be at least 1".into());
        }
        let mut by_name = HashMap::new();
        let mut slots = Vec::with_capacity(queues.len());
        for (index, (name, max_workers)) in queues.into_iter().enumerate() {
            if max_workers == 0 {
                return Err(format!("queue {name:?}: max_workers must be at least 1"));
            }
            if by_name.insert(name.clone(), index).is_some() {
                return Err(format!("queue {name:?} is listed twice"));
            }
            slots.push(QueueSlots {
                name,
                max_workers,
                running: 0,
                reserved: 0,
                maybe_has_jobs: true,
                wake_ups: 0,
            });
        }
        Ok(Dispatcher {
            queues: slots,
            by_name,
            held: HashMap::new(),
            claim_batch_max,
            global_max,
        })
    }

    pub fn queues(&self) -> &[QueueSlots] {
        &self.queues
    }

    pub fn queue_index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// Reserves free slots on every queue that may have jobs; `None` means
    /// there is nothing worth claiming now.
    pub fn plan_claim(&mut self) -> Option<ClaimPlan> {
        let mut global_free = self.global_free();
        let mut wanted = Vec::new();
        let mut wake_ups = Vec::new();
        for (index, queue) in self.queues.iter_mut().enumerate() {
            if !queue.maybe_has_jobs || global_free == 0 {
                continue;
            }
            let free = queue.max_workers - queue.running - queue.reserved;
            let count = free.min(self.claim_batch_max).min(global_free);
            if count == 0 {
                continue;
            }
            queue.reserved += count;
            global_free -= count;
            wanted.push((index, count));
            wake_ups.push(queue.wake_ups);
        }
        if wanted.is_empty() {
            return None;
        }
        let started = vec![0; wanted.len()];
        Some(ClaimPlan {
            wanted,
            started,
            wake_ups,
        })
    }

    /// A claimed job begins: it takes one of the plan's reserved slots of
    /// its queue. Returns false (and changes nothing) for a queue the plan
    /// did not reserve, a plan already used up, or a job already held.
    pub fn start(
        &mut self,
        plan: &mut ClaimPlan,
        job_id: i64,
        run_lease: i64,
        queue: usize,
    ) -> bool {
        if self.held.contains_key(&job_id) || !plan.take_slot(queue) {
            return false;
        }
        let slots = &mut self.queues[queue];
        slots.reserved -= 1;
        slots.running += 1;
        self.held.insert(job_id, Held { queue, run_lease });
        true
    }

    /// Returns the unused part of a plan. A queue that gave fewer jobs than
    /// asked is drained for now, unless a wake-up came while the claim was
    /// in flight; a claim that `failed` says nothing about what the queues
    /// hold, so they stay ready (the retry claims at once instead of waiting
    /// for the next poll).
    pub fn settle_claim(&mut self, plan: &ClaimPlan, failed: bool) {
        for ((&(index, wanted), &started), &wake_ups) in
            plan.wanted.iter().zip(&plan.started).zip(&plan.wake_ups)
        {
            let queue = &mut self.queues[index];
            queue.reserved -= wanted - started;
            if started < wanted && !failed && queue.wake_ups == wake_ups {
                queue.maybe_has_jobs = false;
            }
        }
    }

    /// A handler returned (or its job was released): the slot is free.
    /// Returns the job's queue, or `None` if this worker did not hold it.
    pub fn finish(&mut self, job_id: i64) -> Option<usize> {
        let held = self.held.remove(&job_id)?;
        let queue = &mut self.queues[held.queue];
        queue.running -= 1;
        Some(held.queue)
    }

    /// Whether a claim now could take anything.
    pub fn can_claim(&self) -> bool {
        self.global_free() > 0
            && self
                .queues
                .iter()
                .any(|q| q.maybe_has_jobs && q.running + q.reserved < q.max_workers)
    }

    /// A notification or a poll says `queue` may have jobs.
    pub fn mark_ready(&mut self, queue: usize) {
        if let Some(slots) = self.queues.get_mut(queue) {
            slots.maybe_has_jobs = true;
            slots.wake_ups += 1;
        }
    }

    pub fn mark_all_ready(&mut self) {
        for queue in &mut self.queues {
            queue.maybe_has_jobs = true;
            queue.wake_ups += 1;
        }
    }

    pub fn held(&self) -> impl Iterator<Item = (i64, Held)> + '_ {
        self.held.iter().map(|(&id, &held)| (id, held))
    }

    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    pub fn lease_of(&self, job_id: i64) -> Option<i64> {
        self.held.get(&job_id).map(|held| held.run_lease)
    }

    fn global_free(&self) -> u32 {
        match self.global_max {
            None => u32::MAX,
            Some(limit) => {
                let used: u32 = self.queues.iter().map(|q| q.running + q.reserved).sum();
                limit.saturating_sub(used)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dispatcher(queues: &[(&str, u32)], batch: u32, global: Option<u32>) -> Dispatcher {
        Dispatcher::new(
            queues.iter().map(|(n, m)| ((*n).to_owned(), *m)).collect(),
            batch,
            global,
        )
        .unwrap()
    }

    #[test]
    fn plans_up_to_free_slots_and_batch_size() {
        let mut d = dispatcher(&[("email", 8), ("default", 32)], 10, None);
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(0, 8), (1, 10)]);
        // A second claim in flight only gets what the first did not reserve.
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(1, 10)]);
    }

    #[test]
    fn reservations_prevent_overfilling() {
        let mut d = dispatcher(&[("q", 3)], 100, None);
        let mut plan = d.plan_claim().unwrap();
        assert_eq!(plan.wanted, vec![(0, 3)]);
        assert!(d.plan_claim().is_none());
        for id in 1..=3 {
            assert!(d.start(&mut plan, id, 1, 0));
        }
        assert!(!d.start(&mut plan, 4, 1, 0), "the plan is used up");
        d.settle_claim(&plan, false);
        assert_eq!(d.queues()[0].running, 3);
        assert!(!d.can_claim());
        assert_eq!(d.finish(2), Some(0));
        assert!(d.can_claim());
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(0, 1)]);
    }

    #[test]
    fn claims_in_flight_settle_independently() {
        let mut d = dispatcher(&[("q", 10)], 4, None);
        let mut first = d.plan_claim().unwrap();
        let mut second = d.plan_claim().unwrap();
        assert_eq!(
            (first.wanted.clone(), second.wanted.clone()),
            (vec![(0, 4)], vec![(0, 4)])
        );
        for id in 1..=4 {
            assert!(d.start(&mut second, id, 1, 0));
        }
        d.settle_claim(&second, false);
        assert!(d.start(&mut first, 5, 1, 0));
        d.settle_claim(&first, false);
        let queue = &d.queues()[0];
        assert_eq!((queue.running, queue.reserved), (5, 0));
        // The first claim came back short: the queue is drained for now.
        assert!(d.plan_claim().is_none());
    }

    #[test]
    fn a_plan_only_starts_jobs_of_its_own_queues() {
        let mut d = dispatcher(&[("a", 2), ("b", 2)], 10, None);
        let first = d.plan_claim().unwrap();
        d.settle_claim(&first, false); // both came back empty
        d.mark_ready(0);
        let mut only_a = d.plan_claim().unwrap();
        assert_eq!(only_a.wanted, vec![(0, 2)]);
        assert!(!d.start(&mut only_a, 1, 1, 1), "queue b was not reserved");
        assert!(d.start(&mut only_a, 1, 1, 0));
    }

    #[test]
    fn a_short_claim_marks_the_queue_empty_until_woken() {
        let mut d = dispatcher(&[("q", 10)], 10, None);
        let mut plan = d.plan_claim().unwrap();
        assert!(d.start(&mut plan, 1, 1, 0));
        d.settle_claim(&plan, false);
        assert_eq!(d.queues()[0].reserved, 0);
        assert!(d.plan_claim().is_none());
        assert!(!d.can_claim());
        d.mark_ready(0);
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(0, 9)]);
    }

    #[test]
    fn a_failed_claim_gives_back_its_reservation_and_keeps_the_queue_ready() {
        let mut d = dispatcher(&[("q", 4)], 10, None);
        let plan = d.plan_claim().unwrap();
        d.settle_claim(&plan, true);
        assert_eq!(d.queues()[0].reserved, 0);
        assert_eq!(d.queues()[0].running, 0);
        assert!(
            d.can_claim(),
            "a failed claim learned nothing about the queue"
        );
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(0, 4)]);
    }

    #[test]
    fn the_global_cap_spans_queues() {
        let mut d = dispatcher(&[("a", 5), ("b", 5)], 10, Some(6));
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(0, 5), (1, 1)]);
        assert!(d.plan_claim().is_none());
    }

    #[test]
    fn finishing_an_unknown_job_is_harmless() {
        let mut d = dispatcher(&[("q", 1)], 1, None);
        assert_eq!(d.finish(42), None);
        let mut plan = d.plan_claim().unwrap();
        assert!(d.start(&mut plan, 7, 3, 0));
        d.settle_claim(&plan, false);
        d.mark_ready(0);
        assert!(d.plan_claim().is_none(), "the only slot is taken");
        d.finish(7);
        let mut again = d.plan_claim().unwrap();
        assert!(d.start(&mut again, 7, 4, 0));
        d.settle_claim(&again, false);
        let mut third = plan_of(vec![(0, 1)]);
        assert!(!d.start(&mut third, 7, 5, 0), "already held");
        assert_eq!(d.lease_of(7), Some(4));
        assert_eq!(d.held_count(), 1);
        assert_eq!(d.finish(7), Some(0));
        assert_eq!(d.finish(7), None);
    }

    fn plan_of(wanted: Vec<(usize, u32)>) -> ClaimPlan {
        let started = vec![0; wanted.len()];
        let wake_ups = vec![0; wanted.len()];
        ClaimPlan {
            wanted,
            started,
            wake_ups,
        }
    }

    #[test]
    fn a_wake_up_during_a_claim_in_flight_outlives_its_short_result() {
        let mut d = dispatcher(&[("q", 10)], 10, None);
        let plan = d.plan_claim().unwrap();
        // A job is inserted and notified after the claim took its snapshot.
        d.mark_ready(0);
        d.settle_claim(&plan, false); // came back empty
        assert!(d.can_claim(), "the notification is not lost");
        let again = d.plan_claim().unwrap();
        d.settle_claim(&again, false); // empty, and nothing woke it meanwhile
        assert!(!d.can_claim());
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(Dispatcher::new(vec![], 1, None).is_err());
        assert!(Dispatcher::new(vec![("q".into(), 0)], 1, None).is_err());
        assert!(Dispatcher::new(vec![("q".into(), 1), ("q".into(), 2)], 1, None).is_err());
        assert!(Dispatcher::new(vec![("q".into(), 1)], 0, None).is_err());
        assert!(Dispatcher::new(vec![("q".into(), 1)], 1, Some(0)).is_err());
    }
}
