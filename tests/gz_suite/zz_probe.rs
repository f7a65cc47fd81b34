use crate::gz_common::*;
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_install_times() {
    let srv = TestServer::new(false);
    let dir = tempfile::tempdir().unwrap();
    let mut total = std::time::Duration::ZERO;
    for i in 0..6 {
        let img = image("vm-agent", &format!("1.0.{i}"));
        let f = write_image(&img, dir.path());
        let t0 = std::time::Instant::now();
        ok(&srv.gz_offline(&["install", f.to_str().unwrap()]).await);
        if i > 0 { total += t0.elapsed(); }
    }
    eprintln!("PROBE upgrade avg {:?}", total / 5);
}
