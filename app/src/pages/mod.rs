//! One module per page, plus the formatting and the small widgets they share (`reveal`: a
//! query with its invisible characters shown as markers).

pub mod admin;
pub mod form_error;
pub mod format;
mod not_found;
mod query;
mod query_age;
#[cfg(feature = "hydrate")]
mod query_live;
pub mod reveal;
mod service_hold;
mod widgets;

pub use admin::{
    BulkPage, DeadWorkPage, LeasesPage, LoginPage, OverviewPage, TaskPage, TasksPage, UpstreamsPage,
};
pub use not_found::NotFound;
pub use query::{QueryPage, QueryResultPage, ReadQuery, SubmitQuery, UpstreamNames};
pub use service_hold::ServiceHold;
