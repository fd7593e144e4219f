use super::*;

fn module(id: &str) -> Module {
    Module {
        id: id.into(),
        name: "m".into(),
        world: "mapper".into(),
        exports: vec!["weir:transform/map".into()],
        imports: vec![],
        size: 100,
        uploaded_at: now(),
    }
}

fn pipeline(tenant: &str, name: &str, module: &str) -> PipelineRow {
    PipelineRow {
        tenant: tenant.into(),
        name: name.into(),
        spec: serde_json::json!({"name": name}),
        modules: BTreeMap::from([("step-0".to_owned(), module.to_owned())]),
        desired: Desired::Running,
        state: PipelineState::Starting,
        restarts: 0,
        last_error: None,
        savepoint: None,
        created_at: now(),
        workers: 1,
    }
}

#[test]
fn the_catalog_survives_a_reopen_at_the_same_schema_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("catalog.sqlite");
    {
        let c = Catalog::open(&path).expect("open");
        assert!(
            c.put_tenant("a", &Quotas::default(), None, false)
                .expect("put")
        );
        c.add_token("a", "k1", "h1").expect("token");
        assert!(c.add_module("a", &module("m1")).expect("module"));
        assert_eq!(
            c.add_pipeline(&pipeline("a", "p", "m1"), u32::MAX)
                .expect("pipeline"),
            AddOutcome::Added
        );
    }
    let c = Catalog::open(&path).expect("reopen");
    let version: usize = c
        .conn()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .expect("version");
    assert_eq!(version, MIGRATIONS.len());
    assert_eq!(c.tenants().expect("tenants")[0].tokens, 1);
    assert_eq!(
        c.token("k1").expect("token"),
        Some(("a".into(), "h1".into()))
    );
    assert_eq!(
        c.pipeline("a", "p").expect("p").map(|p| p.desired),
        Some(Desired::Running)
    );
}

#[test]
fn a_catalog_from_a_newer_server_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("catalog.sqlite");
    drop(Catalog::open(&path).expect("open"));
    let conn = Connection::open(&path).expect("raw");
    conn.pragma_update(None, "user_version", MIGRATIONS.len() + 1)
        .expect("bump");
    drop(conn);
    let e = Catalog::open(&path).expect_err("newer refused").to_string();
    assert!(e.contains("use a newer weir"), "{e}");
}

#[test]
fn a_tenants_rows_are_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Catalog::open(&dir.path().join("c.sqlite")).expect("open");
    for t in ["a", "b"] {
        c.put_tenant(t, &Quotas::default(), None, false)
            .expect("put");
    }
    c.add_module("a", &module("m1")).expect("module");
    c.add_pipeline(&pipeline("a", "p", "m1"), u32::MAX)
        .expect("pipeline");
    assert!(c.module("b", "m1").expect("q").is_none());
    assert!(c.pipeline("b", "p").expect("q").is_none());
    assert_eq!(
        c.delete_module("b", "m1").expect("delete"),
        DeleteOutcome::Missing
    );
    assert_eq!(c.module_bytes("b").expect("bytes"), 0);
    assert_eq!(c.module_bytes("a").expect("bytes"), 100);
    // The same bytes uploaded by b are b's own row; the file is shared.
    assert!(c.add_module("b", &module("m1")).expect("module"));
    assert!(!c.add_module("b", &module("m1")).expect("again"));
}

/// The pipeline quota holds under concurrent creations: its count and the insert are
/// one step, so eight creations at once against a quota of three add exactly three.
#[test]
fn concurrent_creations_never_pass_the_pipeline_quota() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Catalog::open(&dir.path().join("c.sqlite")).expect("open");
    c.put_tenant("a", &Quotas::default(), None, false)
        .expect("put");
    let barrier = std::sync::Barrier::new(8);
    let outcomes: Vec<AddOutcome> = std::thread::scope(|scope| {
        let adds: Vec<_> = (0..8)
            .map(|i| {
                let (c, barrier) = (&c, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    c.add_pipeline(&pipeline("a", &format!("p{i}"), "m1"), 3)
                        .expect("add")
                })
            })
            .collect();
        adds.into_iter()
            .map(|t| t.join().expect("thread"))
            .collect()
    });
    let added = outcomes.iter().filter(|&&o| o == AddOutcome::Added).count();
    assert_eq!(added, 3, "{outcomes:?}");
    assert_eq!(c.pipelines("a").expect("pipelines").len(), 3);
    let first = outcomes
        .iter()
        .position(|&o| o == AddOutcome::Added)
        .expect("one added");
    assert_eq!(
        c.add_pipeline(&pipeline("a", &format!("p{first}"), "m1"), 9)
            .expect("add"),
        AddOutcome::Exists
    );
}

#[test]
fn a_module_in_use_is_not_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Catalog::open(&dir.path().join("c.sqlite")).expect("open");
    c.put_tenant("a", &Quotas::default(), None, false)
        .expect("put");
    c.add_module("a", &module("m1")).expect("module");
    c.add_pipeline(&pipeline("a", "p", "m1"), u32::MAX)
        .expect("pipeline");
    assert_eq!(
        c.delete_module("a", "m1").expect("delete"),
        DeleteOutcome::InUse(vec!["p".into()])
    );
    assert!(c.delete_pipeline("a", "p").expect("delete p"));
    assert_eq!(
        c.delete_module("a", "m1").expect("delete"),
        DeleteOutcome::Deleted
    );
    assert!(!c.module_in_store("m1").expect("store"));
}
