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
//! # Prefetch
//! A queue may hold up to [`Prefetch::jobs`] claimed jobs beyond its free
//! slots: as many as its slots get through within [`Prefetch::wait_s`] at
//! its mean handler time, so a prefetched job waits about that long at most
//! and long handlers never prefetch (a job held back for seconds in one
//! process while another has free slots would be worse than the round trip
//! saved). They wait here, in claim order, and [`Dispatcher::start_next`]
//! starts one the moment a slot frees, so a short handler's slot is never
//! idle for a claim's round trip. While they keep the slots busy, claims
//! wait until they can be full. A cap across queues (`global_max`)
//! turns prefetch off.
//!
//! # State model
//! Per queue: `running <= max_workers`, `running + waiting + reserved <=
//! max_workers + prefetch allowance`, and the sum over queues stays under the
//! optional global cap. A queue whose last claim came back
//! short is marked empty and skipped until something says it may have work
//! again (a notification, a poll tick, or a retry scheduled by this worker).
//!
//! # Failure handling
//! A claim that fails must still be settled, so reservations never leak.
//! `finish` of an unknown job is ignored and reported, never a panic.

use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};

/// How the mean handler time follows new samples: each finished handler
/// moves it this fraction of the way.
const HANDLER_TIME_WEIGHT: f64 = 0.2;

/// Claiming ahead of free slots; `jobs == 0` turns it off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prefetch {
    /// At most this many waiting jobs per queue.
    pub jobs: u32,
    /// The longest a prefetched job should expect to wait for its slot
    /// (seconds), at the queue's mean handler time.
    pub wait_s: f64,
}

impl Prefetch {
    pub const OFF: Prefetch = Prefetch {
        jobs: 0,
        wait_s: 0.0,
    };
}

/// One queue this worker serves.
#[derive(Clone, Debug)]
pub struct QueueSlots {
    pub name: String,
    pub max_workers: u32,
    pub running: u32,
    pub reserved: u32,
    /// Claimed beyond the free slots, in claim order; started by
    /// [`Dispatcher::start_next`].
    waiting: VecDeque<i64>,
    /// Mean handler time lately, in seconds; `None` until one finished.
    handler_s: Option<f64>,
    /// False after a short claim, until a wake-up says otherwise.
    maybe_has_jobs: bool,
    /// Counts wake-ups, so a claim that was already in flight when one came
    /// (its snapshot may predate the new job) cannot undo it.
    wake_ups: u64,
    /// Paused fleet-wide (`pause_queue`): no claim takes its jobs.
    paused: bool,
    /// Its share of `global_max_workers` against the other queues' (1 by default).
    weight: u32,
    /// Slots it gets before any queue above its share, while it has work.
    min_workers: u32,
}

/// A job held by this worker: which queue's slot it takes, and its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub queue: usize,
    pub run_lease: i64,
    /// False while the job waits for a slot (prefetched).
    pub started: bool,
}

/// What [`Dispatcher::start`] made of a claimed job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// A slot was free: run it now.
    Run,
    /// Prefetched: it waits for a slot.
    Wait,
}

impl QueueSlots {
    /// Jobs prefetched now, waiting for a slot.
    pub fn waiting(&self) -> u32 {
        u32::try_from(self.waiting.len()).unwrap_or(u32::MAX)
    }

    /// Places running, waiting or reserved by a claim in flight.
    fn taken(&self) -> u32 {
        self.running + self.waiting() + self.reserved
    }

    /// Jobs this queue may hold beyond its slots: as many as its slots get
    /// through, at the queue's mean handler time, within the prefetch wait.
    fn ahead(&self, prefetch: Prefetch) -> u32 {
        let Some(mean) = self.handler_s else {
            return 0; // nothing known: a long handler must not be held back
        };
        let within_wait = f64::from(self.max_workers) * prefetch.wait_s / mean.max(1e-6);
        if within_wait >= f64::from(prefetch.jobs) {
            return prefetch.jobs;
        }
        // In [0, jobs) here (wait_s >= 0, mean > 0), so it fits; the floor
        // keeps the expected wait within wait_s.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let ahead = within_wait as u32;
        ahead
    }

    /// Jobs a claim may take now: free slots plus the prefetch allowance.
    /// While prefetched jobs keep the slots busy, a claim waits until it
    /// can be a full one: claims of a few jobs each would cost the database
    /// as much per claim. Full is `batch` jobs, all the queue can hold, or
    /// half the allowance, whichever is least, so the other half keeps the
    /// slots busy while the claim is in flight.
    fn room(&self, prefetch: Prefetch, batch: u32) -> u32 {
        let ahead = self.ahead(prefetch);
        let capacity = self.max_workers + ahead;
        let room = capacity.saturating_sub(self.taken());
        let full = batch.min(capacity).min((ahead / 2).max(1));
        if !self.waiting.is_empty() && room < full {
            0
        } else {
            room
        }
    }
}

#[derive(Debug)]
pub struct Dispatcher {
    queues: Vec<QueueSlots>,
    by_name: HashMap<String, usize>,
    held: HashMap<i64, Held>,
    claim_batch_max: u32,
    global_max: Option<u32>,
    prefetch: Prefetch,
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
        prefetch: Prefetch,
    ) -> Result<Self, String> {
        if !(prefetch.wait_s >= 0.0 && prefetch.wait_s.is_finite()) {
            return Err(
                "the prefetch threshold must be a finite number of seconds, 0 or more".into(),
            );
        }
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
                waiting: VecDeque::new(),
                handler_s: None,
                maybe_has_jobs: true,
                wake_ups: 0,
                paused: false,
                weight: 1,
                min_workers: 0,
            });
        }
        Ok(Dispatcher {
            queues: slots,
            by_name,
            held: HashMap::new(),
            claim_batch_max,
            global_max,
            // Under a cap across queues, a job waiting for a slot of its own
            // queue would hold a place under the cap that another queue's
            // free slot could use.
            prefetch: if global_max.is_some() {
                Prefetch::OFF
            } else {
                prefetch
            },
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
        let counts = self.claimable();
        let counts = match self.global_max {
            None => counts,
            Some(_) => self.shares_of_free_slots(&counts),
        };
        let mut wanted = Vec::new();
        let mut wake_ups = Vec::new();
        for (index, (queue, count)) in self.queues.iter_mut().zip(counts).enumerate() {
            if count == 0 {
                continue;
            }
            queue.reserved += count;
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

    /// What a claim could take from each queue now, ignoring the global cap.
    fn claimable(&self) -> Vec<u32> {
        self.queues
            .iter()
            .map(|queue| {
                if queue.maybe_has_jobs && !queue.paused {
                    queue
                        .room(self.prefetch, self.claim_batch_max)
                        .min(self.claim_batch_max)
                } else {
                    0
                }
            })
            .collect()
    }

    /// The global cap's free slots handed out one at a time to the queue
    /// that can take one and holds least against its share: first queues
    /// below their `min_workers`, then the lowest slots per unit of weight
    /// (ties to the queue listed first). Every queue with work gets its
    /// share; none waits for another to run dry.
    fn shares_of_free_slots(&self, claimable: &[u32]) -> Vec<u32> {
        let mut given = vec![0u32; self.queues.len()];
        let mut free = self.global_free();
        while free > 0 {
            let neediest = (0..self.queues.len())
                .filter(|&index| given[index] < claimable[index])
                .min_by(|&a, &b| self.compare_need(a, given[a], b, given[b]));
            let Some(index) = neediest else { break };
            given[index] += 1;
            free -= 1;
        }
        given
    }

    /// Which of two queues is further from its share: one below its
    /// `min_workers` first, then fewer held slots per unit of weight
    /// (compared exactly, without floats).
    fn compare_need(&self, a: usize, given_a: u32, b: usize, given_b: u32) -> Ordering {
        let (qa, qb) = (&self.queues[a], &self.queues[b]);
        let (held_a, held_b) = (qa.taken() + given_a, qb.taken() + given_b);
        (held_a >= qa.min_workers)
            .cmp(&(held_b >= qb.min_workers))
            .then_with(|| {
                (u64::from(held_a) * u64::from(qb.weight))
                    .cmp(&(u64::from(held_b) * u64::from(qa.weight)))
            })
    }

    /// Sets a queue's share of `global_max_workers`: its `weight` against
    /// the other queues' (at least 1) and the `min_workers` it gets first
    /// while it has work (at most its `max_workers`).
    pub fn set_share(&mut self, queue: usize, weight: u32, min_workers: u32) -> Result<(), String> {
        let Some(slots) = self.queues.get_mut(queue) else {
            return Err(format!("no queue number {queue}"));
        };
        if weight == 0 {
            return Err(format!("queue {:?}: weight must be at least 1", slots.name));
        }
        if min_workers > slots.max_workers {
            return Err(format!(
                "queue {:?}: min_workers ({min_workers}) must not exceed max_workers ({})",
                slots.name, slots.max_workers
            ));
        }
        slots.weight = weight;
        slots.min_workers = min_workers;
        Ok(())
    }

    /// A claimed job arrives: it takes one of the plan's reserved slots of
    /// its queue and runs now if a slot is free, else waits (prefetched).
    /// Returns `None` (and changes nothing) for a queue the plan did not
    /// reserve, a plan already used up, or a job already held.
    pub fn start(
        &mut self,
        plan: &mut ClaimPlan,
        job_id: i64,
        run_lease: i64,
        queue: usize,
    ) -> Option<Start> {
        if self.held.contains_key(&job_id) || !plan.take_slot(queue) {
            return None;
        }
        let slots = &mut self.queues[queue];
        slots.reserved -= 1;
        let started = slots.running < slots.max_workers;
        if started {
            slots.running += 1;
        } else {
            slots.waiting.push_back(job_id);
        }
        self.held.insert(
            job_id,
            Held {
                queue,
                run_lease,
                started,
            },
        );
        Some(if started { Start::Run } else { Start::Wait })
    }

    /// Starts the queue's longest-waiting prefetched job if a slot is free;
    /// returns its id.
    pub fn start_next(&mut self, queue: usize) -> Option<i64> {
        let slots = self.queues.get_mut(queue)?;
        if slots.running >= slots.max_workers {
            return None;
        }
        let job_id = slots.waiting.pop_front()?;
        slots.running += 1;
        if let Some(held) = self.held.get_mut(&job_id) {
            held.started = true;
        }
        Some(job_id)
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

    /// A handler returned after `handler_s` seconds (`None`: the job was
    /// released, held back or cancelled unrun, which says nothing about its
    /// handler), or a waiting job left: its place is free. Returns the job's
    /// queue, or `None` if this worker did not hold it.
    pub fn finish(&mut self, job_id: i64, handler_s: Option<f64>) -> Option<usize> {
        let held = self.held.remove(&job_id)?;
        let queue = &mut self.queues[held.queue];
        if held.started {
            queue.running -= 1;
        } else {
            queue.waiting.retain(|&waiting| waiting != job_id);
        }
        if let Some(seconds) = handler_s.filter(|s| s.is_finite() && *s >= 0.0) {
            queue.handler_s = Some(match queue.handler_s {
                None => seconds,
                Some(mean) => mean + (seconds - mean) * HANDLER_TIME_WEIGHT,
            });
        }
        Some(held.queue)
    }

    /// Whether a claim now could take anything.
    pub fn can_claim(&self) -> bool {
        self.global_free() > 0
            && self.queues.iter().any(|q| {
                q.maybe_has_jobs && !q.paused && q.room(self.prefetch, self.claim_batch_max) > 0
            })
    }

    /// A notification or a poll says `queue` may have jobs.
    pub fn mark_ready(&mut self, queue: usize) {
        if let Some(slots) = self.queues.get_mut(queue) {
            slots.maybe_has_jobs = true;
            slots.wake_ups += 1;
        }
    }

    /// Pauses or resumes `queue` in this worker. Resuming marks it ready:
    /// jobs may have arrived while it was paused.
    pub fn set_paused(&mut self, queue: usize, paused: bool) {
        if let Some(slots) = self.queues.get_mut(queue) {
            let resumed = slots.paused && !paused;
            slots.paused = paused;
            if resumed {
                self.mark_ready(queue);
            }
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
                let used: u32 = self.queues.iter().map(QueueSlots::taken).sum();
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
            Prefetch::OFF,
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
            assert_eq!(d.start(&mut plan, id, 1, 0), Some(Start::Run));
        }
        assert_eq!(d.start(&mut plan, 4, 1, 0), None, "the plan is used up");
        d.settle_claim(&plan, false);
        assert_eq!(d.queues()[0].running, 3);
        assert!(!d.can_claim());
        assert_eq!(d.finish(2, None), Some(0));
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
            assert_eq!(d.start(&mut second, id, 1, 0), Some(Start::Run));
        }
        d.settle_claim(&second, false);
        assert_eq!(d.start(&mut first, 5, 1, 0), Some(Start::Run));
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
        assert_eq!(
            d.start(&mut only_a, 1, 1, 1),
            None,
            "queue b was not reserved"
        );
        assert_eq!(d.start(&mut only_a, 1, 1, 0), Some(Start::Run));
    }

    #[test]
    fn a_short_claim_marks_the_queue_empty_until_woken() {
        let mut d = dispatcher(&[("q", 10)], 10, None);
        let mut plan = d.plan_claim().unwrap();
        assert_eq!(d.start(&mut plan, 1, 1, 0), Some(Start::Run));
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
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(0, 3), (1, 3)]);
        assert!(d.plan_claim().is_none());
    }

    #[test]
    fn under_the_global_cap_slots_follow_the_weights() {
        let mut d = dispatcher(&[("a", 10), ("b", 10), ("c", 10)], 10, Some(8));
        d.set_share(0, 3, 0).unwrap();
        d.set_share(2, 4, 0).unwrap();
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(0, 3), (1, 1), (2, 4)]);
    }

    #[test]
    fn a_queue_without_work_leaves_its_share_to_the_others() {
        let mut d = dispatcher(&[("a", 10), ("b", 10)], 10, Some(8));
        let mut plan = d.plan_claim().unwrap();
        assert_eq!(plan.wanted, vec![(0, 4), (1, 4)]);
        for job_id in 1..=4 {
            d.start(&mut plan, job_id, 1, 0).unwrap();
        }
        // b's part of the claim came back empty: a takes every free slot.
        d.settle_claim(&plan, false);
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(0, 4)]);
    }

    #[test]
    fn a_queue_below_its_minimum_gets_freed_slots_first() {
        let mut d = dispatcher(&[("a", 10), ("b", 10)], 10, Some(4));
        d.set_share(0, 100, 0).unwrap();
        d.set_share(1, 1, 2).unwrap();
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(0, 2), (1, 2)]);
    }

    #[test]
    fn bad_shares_are_refused() {
        let mut d = dispatcher(&[("a", 2)], 10, Some(4));
        assert!(d
            .set_share(0, 0, 0)
            .unwrap_err()
            .contains("weight must be at least 1"));
        assert!(d
            .set_share(0, 1, 3)
            .unwrap_err()
            .contains("must not exceed max_workers (2)"));
        assert!(d.set_share(5, 1, 0).is_err());
    }

    #[test]
    fn a_paused_queue_is_not_planned_and_resuming_wakes_it() {
        let mut d = dispatcher(&[("a", 4), ("b", 4)], 10, None);
        d.set_paused(0, true);
        let plan = d.plan_claim().expect("b is claimable");
        assert_eq!(plan.wanted, vec![(1, 4)]);
        d.settle_claim(&plan, true);
        d.set_paused(1, true);
        assert!(d.plan_claim().is_none());
        assert!(!d.can_claim());
        d.set_paused(0, false);
        assert!(d.can_claim());
        assert_eq!(d.plan_claim().expect("a resumed").wanted, vec![(0, 4)]);
    }

    #[test]
    fn finishing_an_unknown_job_is_harmless() {
        let mut d = dispatcher(&[("q", 1)], 1, None);
        assert_eq!(d.finish(42, None), None);
        let mut plan = d.plan_claim().unwrap();
        assert_eq!(d.start(&mut plan, 7, 3, 0), Some(Start::Run));
        d.settle_claim(&plan, false);
        d.mark_ready(0);
        assert!(d.plan_claim().is_none(), "the only slot is taken");
        d.finish(7, None);
        let mut again = d.plan_claim().unwrap();
        assert_eq!(d.start(&mut again, 7, 4, 0), Some(Start::Run));
        d.settle_claim(&again, false);
        let mut third = plan_of(vec![(0, 1)]);
        assert_eq!(d.start(&mut third, 7, 5, 0), None, "already held");
        assert_eq!(d.lease_of(7), Some(4));
        assert_eq!(d.held_count(), 1);
        assert_eq!(d.finish(7, None), Some(0));
        assert_eq!(d.finish(7, None), None);
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

    fn prefetching(max_workers: u32, jobs: u32) -> Dispatcher {
        let prefetch = Prefetch { jobs, wait_s: 0.05 };
        Dispatcher::new(vec![("q".into(), max_workers)], 100, None, prefetch).unwrap()
    }

    /// Runs one job through a claim and finishes it after `seconds`.
    fn run_one(d: &mut Dispatcher, job_id: i64, seconds: f64) {
        let mut plan = d.plan_claim().unwrap();
        assert_eq!(d.start(&mut plan, job_id, 1, 0), Some(Start::Run));
        d.settle_claim(&plan, true);
        d.finish(job_id, Some(seconds));
    }

    #[test]
    fn no_prefetch_until_handlers_are_known_to_be_short() {
        let mut d = prefetching(4, 4);
        assert_eq!(
            d.plan_claim().unwrap().wanted,
            vec![(0, 4)],
            "nothing known yet"
        );
        let mut d = prefetching(4, 4);
        run_one(&mut d, 1, 1.0);
        assert_eq!(
            d.plan_claim().unwrap().wanted,
            vec![(0, 4)],
            "slow handlers"
        );
        let mut d = prefetching(4, 4);
        run_one(&mut d, 1, 0.001);
        assert_eq!(
            d.plan_claim().unwrap().wanted,
            vec![(0, 8)],
            "short handlers"
        );
    }

    #[test]
    fn prefetched_jobs_wait_and_start_in_claim_order_as_slots_free() {
        let mut d = prefetching(2, 2);
        run_one(&mut d, 100, 0.001);
        let mut plan = d.plan_claim().unwrap();
        assert_eq!(plan.wanted, vec![(0, 4)]);
        let starts: Vec<_> = (1..=4).map(|id| d.start(&mut plan, id, 1, 0)).collect();
        assert_eq!(
            starts,
            [
                Some(Start::Run),
                Some(Start::Run),
                Some(Start::Wait),
                Some(Start::Wait)
            ]
        );
        d.settle_claim(&plan, false);
        assert_eq!((d.queues()[0].running, d.queues()[0].waiting()), (2, 2));
        assert_eq!(d.start_next(0), None, "no slot is free");
        assert!(!d.can_claim(), "slots and prefetch are full");
        d.finish(2, Some(0.001));
        assert_eq!(d.start_next(0), Some(3));
        assert_eq!(d.start_next(0), None);
        d.finish(1, Some(0.001));
        assert_eq!(d.start_next(0), Some(4));
        assert_eq!((d.queues()[0].running, d.queues()[0].waiting()), (2, 0));
        assert_eq!(d.held_count(), 2);
    }

    #[test]
    fn a_waiting_job_that_leaves_frees_its_place_and_no_slot() {
        let mut d = prefetching(1, 1);
        run_one(&mut d, 100, 0.001);
        let mut plan = d.plan_claim().unwrap();
        assert_eq!(d.start(&mut plan, 1, 1, 0), Some(Start::Run));
        assert_eq!(d.start(&mut plan, 2, 1, 0), Some(Start::Wait));
        d.settle_claim(&plan, false);
        assert_eq!(d.finish(2, None), Some(0), "cancelled before it ran");
        let queue = &d.queues()[0];
        assert_eq!((queue.running, queue.waiting()), (1, 0));
        assert_eq!(d.start_next(0), None);
    }

    #[test]
    fn prefetch_holds_what_the_slots_get_through_within_the_wait() {
        let mut d = prefetching(2, 25);
        run_one(&mut d, 100, 0.001);
        assert_eq!(
            d.plan_claim().unwrap().wanted,
            vec![(0, 27)],
            "capped by jobs"
        );
        let mut d = prefetching(2, 25);
        run_one(&mut d, 100, 0.01);
        // 2 slots × 0.05 s ÷ 0.01 s per job = 10 jobs within the wait.
        let plan = d.plan_claim().unwrap();
        assert_eq!(plan.wanted, vec![(0, 12)]);
        d.settle_claim(&plan, true);
        for id in 0..20 {
            run_one(&mut d, id, 1.0);
        }
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(0, 2)], "slowed down");
    }

    #[test]
    fn while_jobs_wait_a_claim_waits_until_it_can_be_full() {
        let prefetch = Prefetch {
            jobs: 10,
            wait_s: 1.0,
        };
        let mut d = Dispatcher::new(vec![("q".into(), 4)], 5, None, prefetch).unwrap();
        run_one(&mut d, 100, 0.001);
        let mut plan = d.plan_claim().unwrap();
        assert_eq!(plan.wanted, vec![(0, 5)]);
        for id in 1..=5 {
            d.start(&mut plan, id, 1, 0);
        }
        d.settle_claim(&plan, false);
        let mut more = d.plan_claim().unwrap();
        assert_eq!(more.wanted, vec![(0, 5)], "9 of 14 places are free");
        for id in 6..=10 {
            d.start(&mut more, id, 1, 0);
        }
        d.settle_claim(&more, false);
        // 10 held: 4 run, 6 wait; 4 places left, fewer than a batch.
        assert!(!d.can_claim());
        d.finish(1, Some(0.001));
        assert_eq!(d.start_next(0), Some(5));
        assert!(d.plan_claim().is_some(), "a full batch fits again");
    }

    #[test]
    fn while_jobs_wait_a_claim_keeps_half_the_allowance_in_reserve() {
        // 4 slots of 10 ms handlers may hold 4 × 0.05 s ÷ 0.01 s = 20 jobs
        // ahead; a batch of 100 could never be full while jobs wait.
        let prefetch = Prefetch {
            jobs: 200,
            wait_s: 0.05,
        };
        let mut d = Dispatcher::new(vec![("q".into(), 4)], 100, None, prefetch).unwrap();
        run_one(&mut d, 100, 0.01);
        let mut plan = d.plan_claim().unwrap();
        assert_eq!(plan.wanted, vec![(0, 24)], "4 slots and 20 ahead");
        for id in 1..=24 {
            d.start(&mut plan, id, 1, 0);
        }
        d.settle_claim(&plan, false);
        // 4 run, 20 wait: the next claim waits until 10 places are free.
        for id in 1..=9 {
            d.finish(id, Some(0.01));
            assert!(d.start_next(0).is_some());
            assert!(!d.can_claim(), "{id} places free, 10 wanted");
        }
        d.finish(10, Some(0.01));
        assert!(d.start_next(0).is_some());
        assert_eq!(
            d.plan_claim().unwrap().wanted,
            vec![(0, 10)],
            "10 jobs still wait while it is in flight"
        );
    }

    #[test]
    fn a_global_cap_turns_prefetch_off() {
        let prefetch = Prefetch {
            jobs: 5,
            wait_s: 1.0,
        };
        let mut d = Dispatcher::new(vec![("q".into(), 5)], 100, Some(6), prefetch).unwrap();
        run_one(&mut d, 100, 0.001);
        assert_eq!(d.plan_claim().unwrap().wanted, vec![(0, 5)]);
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(Dispatcher::new(vec![], 1, None, Prefetch::OFF).is_err());
        assert!(Dispatcher::new(vec![("q".into(), 0)], 1, None, Prefetch::OFF).is_err());
        assert!(Dispatcher::new(
            vec![("q".into(), 1), ("q".into(), 2)],
            1,
            None,
            Prefetch::OFF
        )
        .is_err());
        assert!(Dispatcher::new(vec![("q".into(), 1)], 0, None, Prefetch::OFF).is_err());
        assert!(Dispatcher::new(vec![("q".into(), 1)], 1, Some(0), Prefetch::OFF).is_err());
        let nan = Prefetch {
            jobs: 1,
            wait_s: f64::NAN,
        };
        assert!(Dispatcher::new(vec![("q".into(), 1)], 1, None, nan).is_err());
    }
}
