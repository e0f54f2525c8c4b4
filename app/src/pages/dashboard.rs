use leptos::prelude::*;

use crate::status::RedisStatusPanel;

/// The admin dashboard.
#[component]
pub fn DashboardPage() -> impl IntoView {
    view! {
        <section class="panel">
            <h1>"Dashboard"</h1>
        </section>
        <RedisStatusPanel />
    }
}
