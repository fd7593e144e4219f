use super::*;

/// `/proc/self/mountinfo` and `/proc/self/cgroup` of a v1 host (cpu and cpuacct mounted
/// apart, memory under a group of its own), as on the project's CI machines.
const V1_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";
const V1_CGROUP: &str = "\
9:name=systemd:/
4:memory:/jobs/abc
2:cpuacct:/
1:cpu:/
0::/";

#[test]
fn v1_hierarchies_are_found_with_this_process_group_in_each() {
    let found = Hierarchies::parse(V1_CGROUP, V1_MOUNTINFO);
    // The unified mount offers no cpu or memory controller here (no such file).
    let group = found.group(None).expect("v1");
    assert_eq!(group.version(), Version::V1);
    assert_eq!(group.cpu, Path::new("/sys/fs/cgroup/cpu"));
    assert_eq!(group.memory, Path::new("/sys/fs/cgroup/memory/jobs/abc"));
    assert_eq!(
        group.cpuacct.as_deref(),
        Some(Path::new("/sys/fs/cgroup/cpuacct"))
    );
    let tenant = group.child("weir-1").child("team-a");
    assert_eq!(
        tenant.memory,
        Path::new("/sys/fs/cgroup/memory/jobs/abc/weir-1/team-a")
    );
    assert_eq!(tenant.dirs().len(), 3);
}

#[test]
fn a_given_parent_replaces_the_own_group_and_cpu_with_cpuacct_is_one_directory() {
    let mountinfo = "\
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /pod7 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory";
    let cgroup = "3:memory:/pod7/inner\n2:cpu,cpuacct:/pod7";
    let found = Hierarchies::parse(cgroup, mountinfo);
    let own = found.group(None).expect("v1");
    // The memory mount shows only /pod7 of the hierarchy: paths are relative to it.
    assert_eq!(own.memory, Path::new("/sys/fs/cgroup/memory/inner"));
    assert_eq!(own.cpu, Path::new("/sys/fs/cgroup/cpu,cpuacct/pod7"));
    assert_eq!(own.dirs().len(), 2, "cpu and cpuacct share a directory");
    let given = found.group(Some("/pod7/weir")).expect("v1");
    assert_eq!(given.memory, Path::new("/sys/fs/cgroup/memory/weir"));
}

#[test]
fn v2_is_chosen_when_its_group_offers_cpu_and_memory() {
    let root = tempfile::tempdir().expect("tempdir");
    let own = root.path().join("user.slice/weir.service");
    std::fs::create_dir_all(&own).expect("mkdir");
    std::fs::write(
        own.join("cgroup.controllers"),
        "cpuset cpu io memory pids\n",
    )
    .expect("write");
    let mountinfo = format!(
        "30 23 0:26 / {} rw - cgroup2 cgroup2 rw\n35 31 0:32 / /x rw - cgroup cgroup rw,memory",
        root.path().display()
    );
    let found = Hierarchies::parse("0::/user.slice/weir.service", &mountinfo);
    let group = found.group(None).expect("v2");
    assert_eq!(group.version(), Version::V2);
    assert_eq!(group.cpu, own);
    assert_eq!(group.dirs(), vec![own.as_path()]);
    // Without the memory controller, and no v1 cpu hierarchy: nothing usable.
    std::fs::write(own.join("cgroup.controllers"), "cpu pids\n").expect("write");
    assert!(matches!(
        Hierarchies::parse("0::/user.slice/weir.service", &mountinfo).group(None),
        Err(CgroupError::Unavailable(_))
    ));
}

#[test]
fn cpu_quotas_and_weights_are_proportional_to_millicores() {
    let v1 = cpu_settings(Version::V1, Some(250));
    assert_eq!(
        v1,
        vec![
            ("cpu.cfs_period_us", "100000".into()),
            ("cpu.cfs_quota_us", "25000".into()),
            ("cpu.shares", "256".into()),
        ]
    );
    assert_eq!(cpu_settings(Version::V1, None)[1].1, "-1");
    assert_eq!(cpu_settings(Version::V1, None)[2].1, "1024");
    assert_eq!(
        cpu_settings(Version::V2, Some(2_500)),
        vec![
            ("cpu.max", "250000 100000".into()),
            ("cpu.weight", "250".into())
        ]
    );
    assert_eq!(cpu_settings(Version::V2, None)[0].1, "max 100000");
    // The smallest quota still has a valid weight.
    assert_eq!(cpu_settings(Version::V1, Some(1))[2].1, "2");
    assert_eq!(cpu_settings(Version::V2, Some(1))[1].1, "1");
}

#[test]
fn v1_swap_limit_is_lifted_before_the_memory_limit_moves() {
    let v1 = memory_settings(Version::V1, Some(1 << 30));
    let files: Vec<_> = v1.iter().map(|(f, v, _)| (*f, v.as_str())).collect();
    assert_eq!(
        files,
        vec![
            ("memory.memsw.limit_in_bytes", "-1"),
            ("memory.limit_in_bytes", "1073741824"),
            ("memory.memsw.limit_in_bytes", "1073741824"),
        ]
    );
    let v2 = memory_settings(Version::V2, None);
    assert_eq!(v2[0], ("memory.max", "max".into(), true));
    assert_eq!(v2[1], ("memory.swap.max", "max".into(), false));
    assert_eq!(memory_settings(Version::V2, Some(5))[1].1, "0");
}

#[test]
fn limits_and_usage_round_trip_through_the_group_files() {
    let root = tempfile::tempdir().expect("tempdir");
    let group = Group {
        version: Version::V2,
        cpu: root.path().to_owned(),
        memory: root.path().to_owned(),
        cpuacct: Some(root.path().to_owned()),
    };
    group
        .set_limits(&Limits {
            cpu_millicores: Some(500),
            memory_bytes: Some(64 << 20),
        })
        .expect("limits");
    let read = |f: &str| std::fs::read_to_string(root.path().join(f)).expect("read");
    assert_eq!(read("cpu.max"), "50000 100000");
    assert_eq!(read("memory.max"), "67108864");
    assert!(
        !root.path().join("memory.swap.max").exists(),
        "optional file not made"
    );
    std::fs::write(
        root.path().join("cpu.stat"),
        "usage_usec 2500000\nuser_usec 1\nnr_periods 40\nnr_throttled 7\n",
    )
    .expect("write");
    std::fs::write(root.path().join("memory.current"), "1234\n").expect("write");
    std::fs::write(
        root.path().join("memory.events"),
        "low 0\noom 3\noom_kill 2\n",
    )
    .expect("write");
    assert_eq!(
        group.usage(),
        Usage {
            cpu: Duration::from_millis(2_500),
            memory_bytes: 1234,
            oom_kills: 2,
            throttled_periods: 7,
        }
    );
}

#[test]
fn keyed_fields_match_whole_keys_only() {
    let text = "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n";
    assert_eq!(keyed(text, "oom_kill"), Some(4));
    assert_eq!(keyed(text, "oom"), None);
}
