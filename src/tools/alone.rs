//! One tool call run to its end outside a gateway, stepped as the loop steps it: for benches,
//! and for a host that tests its own tool. A call that starts commands, asks the user or waits
//! for a wake from another thread cannot end here and is answered with an error.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{JobId, Start, Tool, ToolContext, ToolResult, Wake, wake};
use crate::clock::{Budget, Clock};
use crate::runner::{Runner, supervisor::Executable};

/// How a call run alone went.
#[derive(Debug)]
pub struct Alone {
    pub result: ToolResult,
    /// The steps after its start (0: it finished at its start).
    pub steps: usize,
    /// The longest its start or any step held the caller.
    pub worst_step: Duration,
}

/// Run `tool` on `args` in `cwd` until it finishes, each start or step given `budget` (the
/// loop gives [`super::STEP_BUDGET`]; `Duration::ZERO` makes a stepped tool do one unit of
/// work per step). What would ask for approval is run as approved.
pub fn run(tool: &mut dyn Tool, cwd: &str, home: &Path, args: &Value, budget: Duration) -> Alone {
    let mut runner = Runner::new(Executable::current(), Duration::from_millis(100), false);
    let wakers = wake::Shared::new(None);
    let mut processes = super::process::Processes::default();
    let mut steps = 0;
    let mut worst_step = Duration::ZERO;
    let (mut approved, mut started) = (false, false);
    // Outside a gateway this is the loop: it reads the clock.
    let clock = Clock::SYSTEM;
    loop {
        let now = clock.now();
        let mut ctx = ToolContext {
            job: JobId(1),
            cwd: cwd.to_string(),
            home,
            session: "",
            provider: "",
            model: "",
            transcript: &[],
            store: None,
            command_timeout: Duration::from_secs(180),
            approved,
            shutting_down: false,
            now,
            budget: Budget::of(clock, now, budget),
            answer: None,
            runner: &mut runner,
            runs: Vec::new(),
            wake: None,
            question: None,
            wakers: &wakers,
            processes: super::process::Scope {
                registry: &mut processes,
                owner: "",
            },
            subagent_depth: 0,
            spawn: false,
        };
        let step_began = clock.now();
        let done = if started {
            tool.step(&mut ctx, args)
        } else {
            match tool.start(&mut ctx, args) {
                Start::Done(result) => Some(result),
                Start::Ask(_) if !approved => {
                    approved = true;
                    continue;
                }
                Start::Ask(_) => Some(ToolResult::failed("asked for approval twice")),
                Start::Later => {
                    started = true;
                    None
                }
            }
        };
        worst_step = worst_step.max(clock.since(step_began));
        let (runs, wake, question) = (std::mem::take(&mut ctx.runs), ctx.wake, ctx.question.take());
        for run in runs {
            runner.discard(run);
        }
        if let Some(result) = done {
            return Alone {
                result,
                steps,
                worst_step,
            };
        }
        steps += 1;
        match (wake, question) {
            (_, Some(_)) => return stuck(tool, steps, worst_step, "it asks the user"),
            (Some(Wake::Again), None) => {}
            (Some(Wake::At(when)), None) => {
                std::thread::sleep(when.saturating_duration_since(clock.now()))
            }
            (None, None) => return stuck(tool, steps, worst_step, "it waits for a run or a wake"),
        }
    }
}

fn stuck(tool: &mut dyn Tool, steps: usize, worst_step: Duration, why: &str) -> Alone {
    tool.cancel(JobId(1));
    Alone {
        result: ToolResult::failed(format!("cannot finish outside a gateway: {why}")),
        steps,
        worst_step,
    }
}
