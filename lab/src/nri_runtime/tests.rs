use super::*;

#[test]
fn ids_look_like_containerds() {
    let a = hex_id(1);
    assert_eq!(a.len(), 64);
    assert!(a
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_ne!(hex_id(1), hex_id(2));
    assert_eq!(uid(3).len(), 36);
}

#[test]
fn requests_use_v061_methods() {
    let pod = make_pod("ns", 1);
    let c = make_container(&pod, 1, api::ContainerState::ContainerCreated);
    let (m, p) = event_request(api::Event::CreateContainer, &pod, Some(&c));
    assert_eq!(m, "CreateContainer");
    let r = api::CreateContainerRequest::decode(p.as_slice()).unwrap();
    assert_eq!(r.container.unwrap().pod_sandbox_id, pod.id);
    let (m, p) = event_request(api::Event::RunPodSandbox, &pod, None);
    assert_eq!(m, "StateChange");
    let r = api::StateChangeEvent::decode(p.as_slice()).unwrap();
    assert_eq!(r.event, api::Event::RunPodSandbox as i32);
    assert_eq!(r.pod.unwrap().name, "rate-1");
    assert_eq!(
        event_request(api::Event::StopContainer, &pod, Some(&c)).0,
        "StopContainer"
    );
    // Not a toy payload: the kubelet's labels, annotations, env and
    // mounts make a container request over a kilobyte.
    let (_, p) = event_request(api::Event::CreateContainer, &pod, Some(&c));
    assert!(p.len() > 1000, "{}", p.len());
}

#[tokio::test]
async fn paced_calls_reach_a_plugin_over_the_mux() {
    // A minimal plugin on the other end of a socketpair: the lab's
    // plugin mux and a ttrpc server answering every call OK.
    let dir = std::env::temp_dir().join(format!("nri-rate-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("nri.sock");
    let listener = listen(&sock).unwrap();
    let truth = dir.join("truth.ndjson");
    let cfg = crate::nri_plugin::PluginConfig {
        name: Some("unit".into()),
        idx: Some("10".into()),
        truth: Some(truth.clone()),
        socket: Some(sock.clone()),
        ..Default::default()
    };
    let opts = crate::nri_plugin::PluginOptions::resolve(cfg).unwrap();
    let plugin = tokio::spawn(crate::nri_plugin::run(opts));
    let summary = run(
        listener,
        1,
        &RateOptions {
            rate: 2000.0,
            duration: Duration::from_millis(100),
            in_flight: 2,
            namespace: "unit".into(),
            sync_pods: 2,
            calls_log: None,
        },
    )
    .await
    .unwrap();
    // The connection is closed with the run: the plugin ends, its truth
    // complete (a bound on the wait, not a timed assertion).
    tokio::time::timeout(Duration::from_secs(30), plugin)
        .await
        .expect("the plugin ends once the peer closes")
        .unwrap()
        .unwrap();
    assert_eq!(summary.plugins.len(), 1);
    assert!(summary.plugins[0].configured);
    assert!(summary.calls_sent > 0);
    assert_eq!(summary.calls_failed, 0);
    assert_eq!(summary.calls_ok, summary.calls_sent);
    assert!(summary
        .per_call
        .contains_key("10-unit StateChange RUN_POD_SANDBOX"));
    let truth = std::fs::read_to_string(&truth).unwrap();
    // Every call answered was received by the plugin (its truth),
    // Configure and Synchronize included.
    let received = truth
        .lines()
        .filter(|l| l.contains("\"source\":\"nri\"") && l.contains("\"outcome\":{\"kind\":\"ok\""))
        .count() as u64;
    // + Configure + Synchronize.
    assert_eq!(received, summary.calls_sent + 2, "{truth}");
    let _ = std::fs::remove_dir_all(&dir);
}
