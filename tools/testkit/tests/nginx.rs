//! A real nginx in front of two tiny backends: requests hashed on a header
//! always reach the same backend, both backends get used, the access log
//! says who served what, and nothing listens after drop.

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use airlock_testkit::TempNginx;

fn accepts_tcp(port: u16) -> bool {
    TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), Duration::from_secs(2)).is_ok()
}

/// A backend on a free loopback port that answers every request with 200
/// and `name` as the body, then closes the connection. Returns its
/// `127.0.0.1:PORT`. The thread lives as long as the test process.
fn backend(name: &'static str) -> String {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            // Read the whole request head first: closing with unread bytes
            // would reset the connection, and nginx would take that for a
            // failed backend and try the other one.
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match stream.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{name}",
                name.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    addr
}

/// A GET through nginx with the given `X-Route` and `Mcp-Session-Id`
/// headers; returns (status code, body). Reads to end-of-file, so nginx
/// has logged the request by the time this returns.
fn get(port: u16, route: &str, session: &str) -> (u16, String) {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Route: {route}\r\n\
         Mcp-Session-Id: {session}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {response:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_string())
}

#[test]
fn hashes_on_a_header_logs_and_stops_on_drop() {
    let a = backend("backend-a");
    let b = backend("backend-b");
    let started = Instant::now();
    let nginx = TempNginx::start(
        &[a.clone(), b.clone()],
        "hash $http_x_route consistent;",
        "",
    )
    .unwrap();
    eprintln!("nginx started in {:?}", started.elapsed());
    let port = nginx.port();
    assert!(accepts_tcp(port));
    assert_eq!(nginx.url("/mcp"), format!("http://127.0.0.1:{port}/mcp"));

    let config = nginx.config_text();
    assert!(
        config.contains("hash $http_x_route consistent;"),
        "{config}"
    );
    assert!(config.contains(&format!("server {a} max_fails=1 fail_timeout=30s;")));
    assert!(config.contains(&format!("server {b} max_fails=1 fail_timeout=30s;")));
    assert!(config.contains(&format!("listen 127.0.0.1:{port};")));
    assert!(config.contains("proxy_buffering off;"));

    let mut served_by = HashMap::new();
    for i in 0..20 {
        let route = format!("route-{i}");
        let mut bodies = BTreeSet::new();
        for n in 0..3 {
            let (status, body) = get(port, &route, &format!("session-{i}-{n}"));
            assert_eq!(status, 200, "{body}");
            bodies.insert(body);
        }
        assert_eq!(bodies.len(), 1, "{route} reached {bodies:?}");
        served_by.insert(route, bodies.pop_first().unwrap());
    }
    let used: BTreeSet<&String> = served_by.values().collect();
    assert_eq!(used.len(), 2, "only {used:?} served 20 routes");

    // The access log names the backend that served each session.
    let log = nginx.access_log();
    for i in 0..20 {
        let addr = match served_by[&format!("route-{i}")].as_str() {
            "backend-a" => &a,
            _ => &b,
        };
        let line = log
            .lines()
            .find(|line| line.contains(&format!("session=session-{i}-0 ")))
            .unwrap_or_else(|| panic!("no line for session-{i}-0 in\n{log}"));
        assert!(line.contains(&format!("upstream={addr} ")), "{line}");
        assert!(line.contains(" 200 \"GET /mcp HTTP/1.1\" "), "{line}");
    }

    drop(nginx);
    assert!(!accepts_tcp(port), "nginx still listens on {port}");
}

#[test]
fn a_bad_config_fails_with_the_error_log() {
    let a = backend("backend-a");
    let err = match TempNginx::start(&[a], "no_such_directive on;", "") {
        Ok(_) => panic!("nginx started with an unknown directive"),
        Err(err) => err,
    };
    assert!(
        err.contains("unknown directive \"no_such_directive\""),
        "{err}"
    );
    assert!(err.contains("error log"), "{err}");

    let err = match TempNginx::start(&["http://127.0.0.1:1".to_string()], "", "") {
        Ok(_) => panic!("nginx started with a URL as an upstream"),
        Err(err) => err,
    };
    assert!(err.contains("give host:port"), "{err}");
}

/// A backend that answers with an event stream: one event at once, then
/// the connection held open with nothing more, as an idle SSE stream is.
fn sse_backend() -> String {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                      Cache-Control: no-cache\r\n\r\ndata: first\n\n",
                );
                // Hold the stream open until nginx closes its side.
                let _ = stream.read(&mut byte);
            });
        }
    });
    addr
}

#[test]
fn an_event_stream_passes_through_and_does_not_hold_up_drop() {
    let nginx = TempNginx::start(&[sse_backend()], "", "").unwrap();
    let port = nginx.port();
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(format!("GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes())
        .unwrap();
    // The first event arrives while the backend still holds the stream
    // open: nothing waits for a buffer to fill or the response to end.
    let mut received = Vec::new();
    let mut chunk = [0u8; 1024];
    while !String::from_utf8_lossy(&received).contains("data: first\n\n") {
        let n = stream.read(&mut chunk).expect("the first event never came");
        assert!(
            n > 0,
            "stream ended early: {:?}",
            String::from_utf8_lossy(&received)
        );
        received.extend_from_slice(&chunk[..n]);
    }

    // Dropping nginx with the stream still open ends it, in bounded time.
    let stopping = Instant::now();
    drop(nginx);
    eprintln!(
        "nginx with an open stream stopped in {:?}",
        stopping.elapsed()
    );
    loop {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(_) => continue,
        }
    }
    assert!(stopping.elapsed() < Duration::from_secs(10));
    assert!(!accepts_tcp(port), "nginx still listens on {port}");
}
