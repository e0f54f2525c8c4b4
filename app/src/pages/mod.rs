//! One module per page.

pub mod admin;
mod not_found;
mod query;

pub use admin::{LeasesPage, LoginPage, OverviewPage, TaskPage, TasksPage};
pub use not_found::NotFound;
pub use query::{QueryPage, QueryResultPage, SubmitQuery};
