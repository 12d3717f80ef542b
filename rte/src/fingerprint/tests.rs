use super::*;

#[test]
fn the_status_file_is_written_atomically_with_upstreams_field_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("worker-0.json");
    let mut fingerprint = Fingerprint::traced();
    fingerprint.add("default", "pod-a");
    let status = Status {
        fingerprint_expected: String::new(),
        fingerprint_computed: fingerprint.sign(),
        pods: fingerprint.pods().unwrap().to_vec(),
        node_name: "worker-0".to_owned(),
    };
    write_status_file(&path, &status).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "fingerprintComputed": "pfp0v0019131e707ccadb65c",
            "pods": [{"Namespace": "default", "Name": "pod-a"}],
            "nodeName": "worker-0",
        })
    );

    let status = Status { fingerprint_expected: "pfp0v001ef46db3751d8e999".to_owned(), ..status };
    write_status_file(&path, &status).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(json["fingerprintExpected"], "pfp0v001ef46db3751d8e999");
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["worker-0.json"], "no temporary file left behind");
}

#[test]
fn the_status_file_reports_where_it_could_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir/status.json");
    match write_status_file(&missing, &Status::default()) {
        Err(StatusError::Write { path, .. }) => assert!(path.ends_with("no-such-dir/__status.json")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        write_status_file(std::path::Path::new("/"), &Status::default()),
        Err(StatusError::NotAFile { .. })
    ));
}
