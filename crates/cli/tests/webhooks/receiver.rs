//! A webhook receiver for the tests: a plain HTTP/1.1 server on loopback that checks each
//! delivery's Standard Webhooks signature with its own HMAC-SHA256 (not the daemon's code),
//! records it, and answers 204, or a redirect on `/redirect`. It can go down (its port
//! refuses connections) and come back on the same port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// One request the receiver took.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub id: String,
    pub timestamp: i64,
    pub signature_ok: bool,
    pub body: serde_json::Value,
}

pub struct Receiver {
    pub port: u16,
    secret: Arc<Mutex<Vec<u8>>>,
    pub seen: Arc<Mutex<Vec<Received>>>,
    running: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl Receiver {
    pub fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut receiver = Receiver {
            port: listener.local_addr().unwrap().port(),
            secret: Arc::default(),
            seen: Arc::default(),
            running: None,
        };
        receiver.serve(listener);
        receiver
    }

    /// The key deliveries are checked with: a `whsec_…` secret.
    pub fn set_secret(&self, secret: &str) {
        let key = STANDARD
            .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
            .unwrap();
        *self.secret.lock().unwrap() = key;
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn received(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }

    /// Stops listening: connections to its port are refused until [`Receiver::up`].
    pub fn down(&mut self) {
        if let Some((stop, thread)) = self.running.take() {
            stop.store(true, Ordering::SeqCst);
            let _ = TcpStream::connect(("127.0.0.1", self.port));
            thread.join().unwrap();
        }
    }

    /// Listens again on the same port.
    pub fn up(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).unwrap();
        self.serve(listener);
    }

    fn serve(&mut self, listener: TcpListener) {
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, secret, flag) = (self.seen.clone(), self.secret.clone(), stop.clone());
        let port = self.port;
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let key = secret.lock().unwrap().clone();
                if let Some(received) = take(stream, &key, port) {
                    seen.lock().unwrap().push(received);
                }
            }
        });
        self.running = Some((stop, thread));
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.down();
    }
}

/// Reads one request, answers it, and says what it was.
fn take(stream: TcpStream, key: &[u8], port: u16) -> Option<Received> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split(' ').nth(1)?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let length: usize = header("content-length").parse().unwrap_or(0);
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    let answer = if path == "/redirect" {
        format!("HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:{port}/followed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    } else {
        "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n".to_owned()
    };
    let mut stream = stream;
    stream.write_all(answer.as_bytes()).ok()?;
    let (id, timestamp) = (header("webhook-id"), header("webhook-timestamp"));
    let signed = format!("{id}.{timestamp}.");
    let expected = format!(
        "v1,{}",
        STANDARD.encode(hmac_sha256(key, &[signed.as_bytes(), &body].concat()))
    );
    let signature_ok = header("webhook-signature")
        .split(' ')
        .any(|candidate| candidate == expected);
    Some(Received {
        path,
        id,
        timestamp: timestamp.parse().unwrap_or(0),
        signature_ok,
        body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    })
}

/// RFC 2104 HMAC over SHA-256.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::digest([pad(0x36).as_slice(), message].concat());
    Sha256::digest([pad(0x5c).as_slice(), inner.as_slice()].concat()).to_vec()
}

#[test]
fn the_hmac_matches_rfc_4231() {
    // RFC 4231, test case 2.
    let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        hex,
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
}
