//! `--shard I/N`: which tasks of a tasks file this process runs when a cluster scheduler runs
//! N of them (a Kubernetes Indexed Job, a Slurm array): those whose id hashes to I, so the
//! assignment depends on the ids alone — not on the file's order, the machine or a rerun.

use super::tasks::stable_hash;

/// The most shards.
const SHARDS_MAX: u32 = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// `I/N`, `0 <= I < N`.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let (i, n) = text
            .split_once('/')
            .ok_or(format!("{text:?} is not I/N (shard I of N, from 0)"))?;
        Shard::of(i, n).map_err(|e| format!("{text:?}: {e}"))
    }

    fn of(index: &str, count: &str) -> Result<Shard, String> {
        let count: u32 = count
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=SHARDS_MAX).contains(n))
            .ok_or(format!(
                "the shard count is not a number from 1 to {SHARDS_MAX}"
            ))?;
        let index: u32 = index
            .trim()
            .parse()
            .ok()
            .filter(|i| *i < count)
            .ok_or(format!(
                "the shard index is not a number from 0 to {}",
                count - 1
            ))?;
        Ok(Shard { index, count })
    }

    /// The shard a scheduler's environment names, when no `--shard` is given: a Kubernetes
    /// Indexed Job's `JOB_COMPLETION_INDEX` (its count in `TUI_GATEWAY_EXEC_SHARDS`: the Job's
    /// `completions`, which Kubernetes does not pass), or a Slurm array's `SLURM_ARRAY_TASK_ID`
    /// (from `SLURM_ARRAY_TASK_MIN`) of `SLURM_ARRAY_TASK_COUNT`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Shard>, String> {
        if let Some(index) = env("JOB_COMPLETION_INDEX") {
            let count = env("TUI_GATEWAY_EXEC_SHARDS").ok_or(
                "JOB_COMPLETION_INDEX is set: give the Job's completions as TUI_GATEWAY_EXEC_SHARDS (or --shard I/N)",
            )?;
            return Shard::of(&index, &count)
                .map(Some)
                .map_err(|e| format!("JOB_COMPLETION_INDEX/TUI_GATEWAY_EXEC_SHARDS: {e}"));
        }
        if let Some(id) = env("SLURM_ARRAY_TASK_ID") {
            let bad = |e: String| format!("SLURM_ARRAY_TASK_ID: {e}");
            let count = env("SLURM_ARRAY_TASK_COUNT")
                .ok_or_else(|| bad("SLURM_ARRAY_TASK_COUNT is not set".into()))?;
            let min: u64 = env("SLURM_ARRAY_TASK_MIN")
                .map_or(Ok(0), |m| m.trim().parse())
                .map_err(|_| bad("SLURM_ARRAY_TASK_MIN is not a number".into()))?;
            let index = id
                .trim()
                .parse::<u64>()
                .ok()
                .and_then(|i| i.checked_sub(min))
                .ok_or_else(|| bad(format!("{id:?} is not a number from SLURM_ARRAY_TASK_MIN")))?;
            return Shard::of(&index.to_string(), &count).map(Some).map_err(bad);
        }
        Ok(None)
    }

    pub fn holds(&self, task_id: &str) -> bool {
        stable_hash(task_id) % u64::from(self.count) == u64::from(self.index)
    }

    /// `I/N`, as records and summaries say it.
    pub fn name(&self) -> String {
        format!("{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_is_in_exactly_one_shard_and_stays_there() {
        let shards: Vec<Shard> = (0..4).map(|i| Shard { index: i, count: 4 }).collect();
        let mut sizes = [0usize; 4];
        for n in 0..1000 {
            let id = format!("task-{n}");
            let holders: Vec<&Shard> = shards.iter().filter(|s| s.holds(&id)).collect();
            assert_eq!(holders.len(), 1, "{id}");
            sizes[holders[0].index as usize] += 1;
        }
        // A hash, not the order: every shard gets a fair part.
        assert!(sizes.iter().all(|n| (180..=320).contains(n)), "{sizes:?}");
        // Pinned: the same id lands in the same shard on every machine and build.
        assert_eq!(stable_hash("task-0"), 0x0b62_5266_02ec_4fb9, "FNV-1a 64");
    }

    #[test]
    fn shards_come_from_the_flag_or_the_scheduler() {
        assert_eq!(Shard::parse("2/4"), Ok(Shard { index: 2, count: 4 }));
        for bad in ["4/4", "1", "a/2", "0/0", "-1/3", "1/200000"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let k8s = env(&[
            ("JOB_COMPLETION_INDEX", "3"),
            ("TUI_GATEWAY_EXEC_SHARDS", "5"),
        ]);
        assert_eq!(
            Shard::from_env(&k8s),
            Ok(Some(Shard { index: 3, count: 5 }))
        );
        assert!(Shard::from_env(&env(&[("JOB_COMPLETION_INDEX", "3")])).is_err());
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "11"),
            ("SLURM_ARRAY_TASK_MIN", "10"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        assert_eq!(
            Shard::from_env(&slurm),
            Ok(Some(Shard { index: 1, count: 4 }))
        );
        assert!(Shard::from_env(&env(&[("SLURM_ARRAY_TASK_ID", "1")])).is_err());
        assert_eq!(Shard::from_env(&env(&[])), Ok(None));
    }
}
