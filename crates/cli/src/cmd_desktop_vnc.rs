//! `berth desktop vnc NAME`: a box's desktop for any VNC viewer. berth listens on a local
//! port and carries each viewer's connection over its own `GET …/desktop/vnc` WebSocket,
//! RFB bytes unchanged both ways, until berth is told to end.
//!
//! Only a loopback address is listened on: the desktop's VNC server asks no password of
//! its own (berth's API key is what guards it), so whoever reaches the port would have the
//! desktop.

use std::net::SocketAddr;

use anyhow::{bail, Context as _};
use futures_util::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio_tungstenite::tungstenite::Message;

use crate::args::box_path;
use crate::client::Client;

/// VNC's own port, display `:0`: what a viewer tries when given only a host.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:5900";

/// The most bytes read from a viewer into one WebSocket message (a frame of RFB input is a
/// few bytes; a clipboard paste may be more).
const CHUNK_BYTES: usize = 64 * 1024;

pub async fn run(client: &Client, name: &str, listen: SocketAddr) -> anyhow::Result<u8> {
    if !listen.ip().is_loopback() {
        bail!(
            "--listen {listen}: only a loopback address (127.0.0.1, ::1), as the desktop asks \
             no password; reach it from elsewhere through an SSH tunnel"
        );
    }
    let path = box_path(name, "/desktop/vnc");
    // One connection first: a box without a desktop, or an unknown one, is said at once
    // rather than to the first viewer, and the box is woken while the viewer is started.
    drop(client.websocket(&path).await?);
    let listener = TcpListener::bind(listen).await.with_context(|| {
        format!("cannot listen on {listen}; choose another port with --listen 127.0.0.1:PORT")
    })?;
    let bound = listener.local_addr()?;
    println!("box {name}'s desktop on vnc://{bound} (a VNC viewer: {bound}); Ctrl-C ends");
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (viewer, from) = accepted.context("accepting a viewer")?;
                let (client, path, name) = (client.clone(), path.clone(), name.to_owned());
                tokio::spawn(async move {
                    if let Err(e) = carry(&client, &path, viewer).await {
                        eprintln!("berth: the viewer at {from} lost box {name}'s desktop: {e:#}");
                    }
                });
            }
            _ = interrupt.recv() => return Ok(0),
            _ = terminate.recv() => return Ok(0),
        }
    }
}

/// Copies between one viewer and its WebSocket until either ends.
async fn carry(client: &Client, path: &str, viewer: TcpStream) -> anyhow::Result<()> {
    let socket = client.websocket(path).await?;
    let (mut to_desktop, mut from_desktop) = socket.split();
    let (mut from_viewer, mut to_viewer) = viewer.into_split();
    let mut chunk = vec![0; CHUNK_BYTES];
    loop {
        tokio::select! {
            read = from_viewer.read(&mut chunk) => match read? {
                0 => {
                    let _ = to_desktop.send(Message::Close(None)).await;
                    return Ok(());
                }
                n => to_desktop.send(Message::Binary(chunk[..n].to_vec().into())).await?,
            },
            message = from_desktop.next() => match message {
                Some(Ok(Message::Binary(bytes))) => to_viewer.write_all(&bytes).await?,
                Some(Ok(Message::Close(_))) | None => return Ok(()),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
            },
        }
    }
}
