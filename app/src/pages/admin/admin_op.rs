//! What an admin can do: one [`AdminOp`] per action, each run by a function of its own (the
//! shape of mini-redis's `Command`). The forms name an action by [`AdminOp::name`], so a
//! button and the server agree by type, not by two copies of a string; `actions::act` parses
//! the name, runs the prologue every action shares (admin session, audit, flash) once, and
//! calls [`AdminOp::run`].

/// Every state-changing admin action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminOp {
    /// A dead or waiting task made due now.
    Retry,
    /// Every dead task retried.
    RetryAllDead,
    /// A live task ended without a result.
    Cancel,
    /// A task's lease given back (only the lease shown, when its token is sent).
    Release,
    /// Every lease already past its deadline, of every upstream, given back.
    ReleaseStuck,
    /// One state's records removed (`id` names it, `confirm` repeats it).
    Purge,
    /// Claims stopped for an upstream (`id`; empty: the default one).
    Pause,
    /// Claims resumed for an upstream.
    Resume,
    /// An upstream's circuit breaker opened for 15 minutes (planned maintenance).
    OpenBreaker,
    /// An upstream's circuit breaker closed.
    CloseBreaker,
    /// Every dashboard session ended, the acting admin's too (who gets a new one).
    SignOutAll,
    /// A worker process told to claim nothing new.
    QuietWorker,
    /// A worker process told to finish or release its calls, then leave.
    StopWorker,
}

impl AdminOp {
    /// Every action, in the order the docs list them.
    pub const ALL: [AdminOp; 13] = [
        AdminOp::Retry,
        AdminOp::RetryAllDead,
        AdminOp::Cancel,
        AdminOp::Release,
        AdminOp::ReleaseStuck,
        AdminOp::Purge,
        AdminOp::Pause,
        AdminOp::Resume,
        AdminOp::OpenBreaker,
        AdminOp::CloseBreaker,
        AdminOp::SignOutAll,
        AdminOp::QuietWorker,
        AdminOp::StopWorker,
    ];

    /// The name a form posts as `op`, and the audit log's action.
    pub const fn name(self) -> &'static str {
        match self {
            AdminOp::Retry => "retry",
            AdminOp::RetryAllDead => "retry_all_dead",
            AdminOp::Cancel => "cancel",
            AdminOp::Release => "release",
            AdminOp::ReleaseStuck => "release_stuck",
            AdminOp::Purge => "purge",
            AdminOp::Pause => "pause",
            AdminOp::Resume => "resume",
            AdminOp::OpenBreaker => "open_breaker",
            AdminOp::CloseBreaker => "close_breaker",
            AdminOp::SignOutAll => "sign_out_all",
            AdminOp::QuietWorker => "quiet_worker",
            AdminOp::StopWorker => "stop_worker",
        }
    }

    /// The action a form's `op` names, if any.
    pub fn parse(name: &str) -> Option<AdminOp> {
        AdminOp::ALL.into_iter().find(|op| op.name() == name)
    }
}

#[cfg(feature = "ssr")]
pub(super) use run::Ask;

/// The actions themselves, one function each; server only.
#[cfg(feature = "ssr")]
mod run {
    use super::AdminOp;
    use crate::auth::refuse;
    use crate::context::AppContext;
    use http::StatusCode;
    use leptos::prelude::ServerFnError;

    /// What a form sent with the action, and who sent it.
    pub struct Ask<'a> {
        pub ctx: &'a AppContext,
        pub who: &'a str,
        /// A task id, a purge target, an upstream's or a worker's name (trimmed).
        pub id: String,
        pub confirm: Option<String>,
        pub token: Option<String>,
    }

    /// What an action did: the audit target, how many things it changed (0: nothing, so not
    /// audited) and the sentence the admin reads.
    pub struct Done {
        pub target: String,
        pub count: u64,
        pub message: String,
    }

    type Answer = Result<Done, ServerFnError>;

    fn done(target: impl Into<String>, count: u64, message: impl Into<String>) -> Answer {
        Ok(Done {
            target: target.into(),
            count,
            message: message.into(),
        })
    }

    fn bad(message: &str) -> ServerFnError {
        refuse(StatusCode::BAD_REQUEST, message)
    }

    /// "1 lease", "3 leases".
    fn plural(n: u64, one: &str, many: &str) -> String {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        }
    }

    /// The audit target of a queue-wide action on an upstream: `kind:<upstream>`
    /// (`queue:default`, `breaker:search`), so every entry names the upstream it acted on.
    fn target_of(kind: &str, upstream: &str) -> String {
        let upstream = if upstream.is_empty() {
            queue::DEFAULT_UPSTREAM
        } else {
            upstream
        };
        format!("{kind}:{upstream}")
    }

    impl Ask<'_> {
        /// A failed queue call: logged with the action, answered with our own words.
        fn failed(&self, op: AdminOp, e: queue::QueueError) -> ServerFnError {
            tracing::error!(error = %e, op = op.name(), "admin action failed");
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "the action failed; see the server log",
            )
        }

        fn task_id(&self) -> Result<queue::TaskId, ServerFnError> {
            self.id.parse().map_err(|_| bad("bad task id"))
        }

        /// The queue of the upstream `id` names (empty: the default one).
        fn named_queue(&self) -> Result<&queue::Queue, ServerFnError> {
            super::super::call::upstream_queue(self.ctx, Some(self.id.as_str()))
        }

        /// The queue that holds the task `id` names, and its id.
        async fn task(&self, op: AdminOp) -> Result<(queue::TaskId, &queue::Queue), ServerFnError> {
            let id = self.task_id()?;
            let q = self
                .ctx
                .queue_of_task(&id)
                .await
                .map_err(|e| self.failed(op, e))?;
            Ok((id, q))
        }
    }

    impl AdminOp {
        /// Runs this action for `ask`.
        pub async fn run(self, ask: &Ask<'_>) -> Answer {
            match self {
                AdminOp::Retry => retry(ask).await,
                AdminOp::RetryAllDead => retry_all_dead(ask).await,
                AdminOp::Cancel => cancel(ask).await,
                AdminOp::Release => release(ask).await,
                AdminOp::ReleaseStuck => release_stuck(ask).await,
                AdminOp::Purge => purge(ask).await,
                AdminOp::Pause => pause(ask).await,
                AdminOp::Resume => resume(ask).await,
                AdminOp::OpenBreaker => open_breaker(ask).await,
                AdminOp::CloseBreaker => close_breaker(ask).await,
                AdminOp::SignOutAll => sign_out_all(ask).await,
                AdminOp::QuietWorker => {
                    command_worker(ask, self, model::WorkerCommand::Quiet).await
                }
                AdminOp::StopWorker => command_worker(ask, self, model::WorkerCommand::Stop).await,
            }
        }
    }

    async fn retry(ask: &Ask<'_>) -> Answer {
        let (id, q) = ask.task(AdminOp::Retry).await?;
        let n = q.retry(&id, ask.who).await;
        let n = u64::from(n.map_err(|e| ask.failed(AdminOp::Retry, e))?);
        let message = if n == 1 {
            format!("retried task {id}")
        } else {
            "nothing retried: the task is not dead or waiting".into()
        };
        done(id.to_string(), n, message)
    }

    async fn retry_all_dead(ask: &Ask<'_>) -> Answer {
        let n = ask.ctx.queue.retry_all_dead(ask.who).await;
        let n = n.map_err(|e| ask.failed(AdminOp::RetryAllDead, e))?;
        let message = format!("retried {}", plural(n, "dead task", "dead tasks"));
        done("dead", n, message)
    }

    async fn cancel(ask: &Ask<'_>) -> Answer {
        let (id, q) = ask.task(AdminOp::Cancel).await?;
        let n = q.cancel(&id, ask.who).await;
        let n = u64::from(n.map_err(|e| ask.failed(AdminOp::Cancel, e))?);
        let message = if n == 1 {
            format!("cancelled task {id}")
        } else {
            "nothing cancelled: no live task with this id".into()
        };
        done(id.to_string(), n, message)
    }

    async fn release(ask: &Ask<'_>) -> Answer {
        let (id, q) = ask.task(AdminOp::Release).await?;
        // With the token shown on the page, only that lease is released: if the task was
        // reclaimed meanwhile, the new holder keeps it.
        let token = ask
            .token
            .as_deref()
            .and_then(|t| t.trim().parse::<u64>().ok());
        let n = match q.release(&id, token, &format!("admin {}", ask.who)).await {
            Ok(released) => u64::from(released),
            Err(queue::QueueError::StaleToken) => 0,
            Err(e) => return Err(ask.failed(AdminOp::Release, e)),
        };
        done(
            id.to_string(),
            n,
            format!("released {}", plural(n, "lease", "leases")),
        )
    }

    /// Only leases already past their deadline: a lease close to it may belong to a healthy
    /// worker about to renew it. Every upstream's queue, as the page lists them.
    async fn release_stuck(ask: &Ask<'_>) -> Answer {
        let failed = |e| ask.failed(AdminOp::ReleaseStuck, e);
        let by = format!("admin {}", ask.who);
        let mut n = 0u64;
        for (_, q) in ask.ctx.queues() {
            let stuck = q.stuck_leases(0, queue::MAX_PAGE).await.map_err(failed)?;
            for l in stuck.iter().filter(|l| l.overdue_ms >= 0) {
                match q.release(&l.id, Some(l.token), &by).await {
                    Ok(true) => n += 1,
                    Ok(false) | Err(queue::QueueError::StaleToken) => {}
                    Err(e) => return Err(failed(e)),
                }
            }
        }
        done(
            "stuck",
            n,
            format!("released {}", plural(n, "lease", "leases")),
        )
    }

    async fn purge(ask: &Ask<'_>) -> Answer {
        let id = ask.id.as_str();
        let target = match id {
            "dead" => queue::PurgeTarget::Dead,
            "results" => queue::PurgeTarget::Results,
            "history" => queue::PurgeTarget::History,
            "queued" => queue::PurgeTarget::Queued,
            _ => return Err(bad("unknown purge target")),
        };
        if ask.confirm.as_deref().map(str::trim) != Some(id) {
            return Err(bad(&format!("not purged: type \"{id}\" to confirm")));
        }
        let n = ask.ctx.queue.purge(target, ask.who).await;
        let n = n.map_err(|e| ask.failed(AdminOp::Purge, e))?;
        done(id, n, format!("purged {n} ({id})"))
    }

    // Pause, resume and the breaker: `id` may name an upstream (the Upstreams page acts on
    // one API); empty: the default one.

    async fn pause(ask: &Ask<'_>) -> Answer {
        let n = ask.named_queue()?.pause(ask.who).await;
        let n = u64::from(n.map_err(|e| ask.failed(AdminOp::Pause, e))?);
        let message = if n == 1 {
            "paused: workers claim nothing until resumed"
        } else {
            "already paused: workers claim nothing until resumed"
        };
        done(target_of("queue", &ask.id), n, message)
    }

    async fn resume(ask: &Ask<'_>) -> Answer {
        let n = ask.named_queue()?.resume(ask.who).await;
        let n = u64::from(n.map_err(|e| ask.failed(AdminOp::Resume, e))?);
        let message = if n == 1 {
            "resumed"
        } else {
            "not paused: nothing to resume"
        };
        done(target_of("queue", &ask.id), n, message)
    }

    /// For a planned upstream maintenance: claims stop at once; a probe goes after 15 minutes
    /// unless an admin closes it first.
    async fn open_breaker(ask: &Ask<'_>) -> Answer {
        let opened = ask.named_queue()?.open_breaker(ask.who, 15 * 60_000).await;
        opened.map_err(|e| ask.failed(AdminOp::OpenBreaker, e))?;
        let message = "breaker open: workers claim nothing for 15 min, then one probe goes";
        done(target_of("breaker", &ask.id), 1, message)
    }

    async fn close_breaker(ask: &Ask<'_>) -> Answer {
        let n = ask.named_queue()?.close_breaker(ask.who).await;
        let n = u64::from(n.map_err(|e| ask.failed(AdminOp::CloseBreaker, e))?);
        let message = if n == 1 {
            "breaker closed: claims resume"
        } else {
            "the breaker was already closed"
        };
        done(target_of("breaker", &ask.id), n, message)
    }

    /// Every session ends (a cookie may have leaked, an operator left): admins and viewers,
    /// the acting admin's too, since the leaked cookie may be that one. The acting admin then
    /// gets a new session with this answer, so the page stays usable.
    async fn sign_out_all(ask: &Ask<'_>) -> Answer {
        let n = crate::auth::Sessions::of(ask.ctx).end_all().await;
        let n = n.map_err(|e| ask.failed(AdminOp::SignOutAll, e))?;
        super::super::login::start_session(ask.ctx, crate::auth::Role::Admin).await?;
        let message = format!(
            "signed out {}; you were given a new session",
            plural(n, "session", "sessions")
        );
        done("sessions", n, message)
    }

    /// A worker process told to go quiet or to stop, through its registry entry (read on its
    /// next heartbeat); `id` is the worker's id as the Workers table shows it.
    async fn command_worker(ask: &Ask<'_>, op: AdminOp, command: model::WorkerCommand) -> Answer {
        let id = ask.id.as_str();
        if id.is_empty() || id.len() > super::super::worker_command::MAX_WORKER_ID {
            return Err(bad("bad worker id"));
        }
        let sent = super::super::worker_command::send_command(ask.ctx, id, command).await;
        let (target, count, message) = sent.map_err(|e| ask.failed(op, e))?;
        done(target, count, message)
    }
}

#[cfg(test)]
mod tests {
    use super::AdminOp;

    #[test]
    fn every_action_is_found_by_its_own_name_and_no_other() {
        for op in AdminOp::ALL {
            assert_eq!(AdminOp::parse(op.name()), Some(op));
        }
        let mut names: Vec<_> = AdminOp::ALL.iter().map(|op| op.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), AdminOp::ALL.len(), "one name each");
        for unknown in ["", "Retry", "retry ", "drop_all"] {
            assert_eq!(AdminOp::parse(unknown), None, "{unknown:?}");
        }
    }
}
