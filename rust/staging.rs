//! Limits on follow-ups a handler stages during one attempt.
//!
//! A handler may stage follow-up jobs that are written together with its
//! completion. Staging is bounded per attempt, by count and by bytes, so a
//! runaway handler cannot make the completion write unbounded; and it closes
//! when the handler returns ([`StagingBudget::seal`]), because a follow-up
//! staged later would never be written.

use crate::payload::Invalid;

/// An attempt may stage at most this many follow-ups.
pub const MAX_STAGED_FOLLOW_UPS: usize = 16;
/// An attempt may stage at most this many bytes of follow-ups, counted by
/// [`row_bytes`].
pub const MAX_STAGED_BYTES: usize = 65_536;

/// The message for a follow-up staged after the handler returned.
pub const CLOSED_MESSAGE: &str = "staging is closed: the handler has already returned \
     (stage follow-ups before returning, or await the task that stages them)";

/// The bytes one follow-up charges against [`MAX_STAGED_BYTES`]: its kind,
/// queue, args JSON, metadata JSON (when it has any) and tags, in UTF-8.
pub fn row_bytes(
    kind: &str,
    queue: &str,
    args_json: &str,
    metadata_json: Option<&str>,
    tags: &[String],
) -> usize {
    kind.len()
        + queue.len()
        + args_json.len()
        + metadata_json.map_or(0, str::len)
        + tags.iter().map(String::len).sum::<usize>()
}

/// Staging was closed by [`StagingBudget::seal`]; the message is
/// [`CLOSED_MESSAGE`].
#[derive(Debug, PartialEq, Eq)]
pub struct Sealed;

impl std::fmt::Display for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(CLOSED_MESSAGE)
    }
}

/// What one attempt has staged so far, and whether it may stage more.
#[derive(Clone, Debug, Default)]
pub struct StagingBudget {
    rows: usize,
    bytes: usize,
    sealed: bool,
}

impl StagingBudget {
    pub fn new() -> Self {
        StagingBudget::default()
    }

    /// Refuses once the budget is sealed. Checked before anything else, so a
    /// late follow-up is reported as late even when it is also invalid.
    pub fn ensure_open(&self) -> Result<(), Sealed> {
        if self.sealed {
            Err(Sealed)
        } else {
            Ok(())
        }
    }

    /// Counts one more follow-up of `bytes` bytes, or refuses it (field
    /// `follow_ups`) when it would break either limit. A refused follow-up
    /// consumes nothing. Does not look at [`StagingBudget::ensure_open`].
    pub fn charge(&mut self, bytes: usize) -> Result<(), Invalid> {
        let rows = self.rows + 1;
        if rows > MAX_STAGED_FOLLOW_UPS {
            return Err(Invalid::new(
                "follow_ups",
                format!(
                    "an attempt may stage at most {MAX_STAGED_FOLLOW_UPS} follow-ups \
                     (this one would be number {rows})"
                ),
            ));
        }
        let total = self.bytes.saturating_add(bytes);
        if total > MAX_STAGED_BYTES {
            return Err(Invalid::new(
                "follow_ups",
                format!(
                    "an attempt may stage at most {MAX_STAGED_BYTES} bytes of follow-ups \
                     (this one would make {total})"
                ),
            ));
        }
        self.rows = rows;
        self.bytes = total;
        Ok(())
    }

    /// Closes staging: the handler has returned.
    pub fn seal(&mut self) {
        self.sealed = true;
    }

    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// Follow-ups staged so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes staged so far, counted by [`row_bytes`].
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_counted_up_to_the_limit() {
        let mut budget = StagingBudget::new();
        for _ in 0..MAX_STAGED_FOLLOW_UPS {
            budget.charge(1).unwrap();
        }
        let refused = budget.charge(1).unwrap_err();
        assert_eq!(refused.field, "follow_ups");
        assert_eq!(
            refused.to_string(),
            "follow_ups: an attempt may stage at most 16 follow-ups (this one would be number 17)"
        );
        assert_eq!(budget.rows(), MAX_STAGED_FOLLOW_UPS);
        assert_eq!(budget.bytes(), MAX_STAGED_FOLLOW_UPS);
    }

    #[test]
    fn bytes_are_counted_up_to_the_limit() {
        let mut budget = StagingBudget::new();
        budget.charge(MAX_STAGED_BYTES - 10).unwrap();
        let refused = budget.charge(11).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "follow_ups: an attempt may stage at most 65536 bytes of follow-ups \
             (this one would make 65537)"
        );
        // The refused follow-up consumed nothing; one that fits still does.
        assert_eq!(budget.bytes(), MAX_STAGED_BYTES - 10);
        assert_eq!(budget.rows(), 1);
        budget.charge(10).unwrap();
        assert_eq!(budget.bytes(), MAX_STAGED_BYTES);
    }

    #[test]
    fn one_follow_up_over_the_byte_limit_is_refused() {
        let mut budget = StagingBudget::new();
        assert!(budget.charge(MAX_STAGED_BYTES + 1).is_err());
        assert!(budget.charge(usize::MAX).is_err());
        assert_eq!(budget.rows(), 0);
    }

    #[test]
    fn sealing_closes_staging() {
        let mut budget = StagingBudget::new();
        assert_eq!(budget.ensure_open(), Ok(()));
        assert!(!budget.is_sealed());
        budget.seal();
        assert!(budget.is_sealed());
        assert_eq!(budget.ensure_open(), Err(Sealed));
        assert!(Sealed.to_string().starts_with("staging is closed"));
    }

    #[test]
    fn row_bytes_count_utf8_bytes_of_every_text_field() {
        assert_eq!(row_bytes("k", "q", "{}", None, &[]), 4);
        assert_eq!(
            row_bytes(
                "é",
                "q",
                "{}",
                Some(r#"{"a":1}"#),
                &["ab".into(), "日".into()]
            ),
            2 + 1 + 2 + 7 + 2 + 3
        );
    }
}
