//! The admin dashboard: sign-in, overview, tasks, task detail, stuck leases — each page
//! server-rendered and hydrated, kept current by the live stream (`/admin/events`).
//!
//! - [`login`]: sign in / out, "who am I".
//! - `frame`: what every signed-in page shares (session check, navigation, live indicator).
//! - `live`: the browser's EventSource and the tick that makes pages re-read.
//! - [`overview`], [`tasks`], [`task`], [`leases`], [`upstreams`]: the pages and their read
//!   functions; `task_rows`: a list's rows (long texts cut, linking to the task page);
//!   `task_result`: the task page's stored result (age, windows, the refresh beside it);
//!   `task_story`: what the queue sums up (polls, the last failed call, the result's story).
//! - `workers`: the overview's Workers table (memory, state, quiet / stop a worker process).
//! - [`actions`]: every state-changing admin action, through one server function;
//!   `queue_actions`: the overview's panel of them. Only an admin is shown any control that
//!   changes something (`ui::can_act`, decided once by the frame);
//!   `confirm`: many-task actions asked with their count first.
//! - `flash` (server only): an action's result after a form post without JavaScript.
//! - [`bulk`]: bulk actions by filter (count first, run in chunks on the server, progress,
//!   stop; one audit entry per run).
//! - `search` (server only): the search box's qualifiers (`state:dead error:"HTTP 500"`)
//!   and running them against a queue; `search_suggest`: what to suggest as it is typed
//!   (pure); `search_box`: the box itself, a combobox of those suggestions, and their server
//!   function.
//! - `chart`, `ui`: SVG charts, formatting and shared widgets (times, the paused banner,
//!   whether the user may act).
//!
//! Pattern: each page body reads its data through one `Resource` keyed on the live tick and
//! its action's version, shown inside a `<Transition>` with `resource.get()` (not a `Suspend`):
//! refetches can overlap up to four times a second, and the plain reactive read always shows
//! exactly the latest answer, keeping the old one on screen until the new one is there.

pub mod actions;
pub mod admin_op;
pub mod attention;
pub mod bulk;
mod bulk_act;
mod bulk_data;
#[cfg(feature = "ssr")]
mod bulk_filter;
#[cfg(feature = "ssr")]
mod call;
mod chart;
mod confirm;
pub mod dead_work;
pub mod facets;
#[cfg(feature = "ssr")]
mod flash;
mod frame;
pub mod leases;
mod listing;
mod listing_view;
mod live;
pub mod login;
pub mod overview;
mod overview_data;
mod queue_actions;
#[cfg(feature = "ssr")]
pub mod search;
pub mod search_box;
pub mod search_suggest;
mod selection;
pub mod task;
mod task_result;
mod task_rows;
mod task_story;
mod task_tabs;
mod task_trace;
pub mod tasks;
mod ui;
pub mod upstreams;
#[cfg(feature = "ssr")]
mod worker_command;
mod workers;

pub use bulk::BulkPage;
pub use dead_work::DeadWorkPage;
pub use leases::LeasesPage;
pub use login::LoginPage;
pub use overview::OverviewPage;
pub use task::TaskPage;
pub use tasks::TasksPage;
pub use upstreams::UpstreamsPage;
