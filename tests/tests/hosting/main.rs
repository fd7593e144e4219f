//! `weir serve`, the multi-tenant host, end to end: its API tried by tenants and by an
//! attacker (walls, quotas, concurrency), the hosting CLI, the OpenAPI document fuzzed
//! with schemathesis, hosted pipelines against the real broker (SIGKILLs, upgrades,
//! N workers), tenant walls enforced by cgroups, and load from 20 pipelines at once.

mod api;
mod cli;
mod fairness;
mod fuzz;
mod kafka;
mod lifecycle;
mod load;
mod names;
mod walls;
mod workers;
