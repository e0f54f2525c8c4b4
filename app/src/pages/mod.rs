//! One module per page.

mod dashboard;
mod not_found;
mod query;

pub use dashboard::DashboardPage;
pub use not_found::NotFound;
pub use query::QueryPage;
