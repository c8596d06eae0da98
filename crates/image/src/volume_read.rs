//! Reading a sleeping box's `/memory` from its volume image, the parent's side: berth's own
//! program is run confined in its volume-reader mode ([`reader_main`], which
//! `volume_reader.rs` answers), given the image as its stdin (opened read-only here: it
//! gets no path and no other file), and its answer is taken whole, up to a cap.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use berth_protocol::memory::{VolumeRead, VolumeReadFailure, VolumeReadFailureKind};

use crate::confine::{self, Limits};
use crate::error::io;
use crate::ImageError;

/// The argument that puts berth's program in its volume-reader mode.
pub const READER_ARG: &str = "__volume-reader";

/// What one read may take: the reader parses at most what it is asked for, so this is far
/// below an e2fsck's needs whatever the image's size.
const READER_LIMITS: Limits = Limits {
    memory_bytes: 512 << 20,
    deadline: Duration::from_secs(30),
};

/// Runs `program` (berth's own binary) confined in its reader mode on `image` and returns
/// what it printed: a [`berth_protocol::memory::MemoryTree`] in JSON, or a file's bytes.
/// [`ImageError::VolumeRead`] carries the reader's own reason.
pub fn read_volume(
    program: &Path,
    image: &Path,
    request: &VolumeRead,
    answer_cap: usize,
) -> Result<Vec<u8>, ImageError> {
    let file = std::fs::File::open(image).map_err(io("open", image))?;
    let request_json = serde_json::to_string(request).expect("a request serializes");
    let args: [&OsStr; 2] = [OsStr::new(READER_ARG), OsStr::new(&request_json)];
    let out = confine::run_own(
        "volume reader",
        program,
        &args,
        file,
        READER_LIMITS,
        answer_cap,
    )?;
    match out.status.code() {
        Some(0) => Ok(out.stdout),
        Some(VolumeReadFailure::EXIT_CODE) => match serde_json::from_str(out.stderr.trim()) {
            Ok(failure) => Err(ImageError::VolumeRead { failure }),
            Err(_) => Err(reader_failed(image, &out)),
        },
        _ => Err(reader_failed(image, &out)),
    }
}

fn reader_failed(image: &Path, out: &confine::CapturedOutput) -> ImageError {
    ImageError::ReaderFailed {
        image: image.to_owned(),
        status: out.status,
        stderr: out.stderr.trim().to_owned(),
    }
}

/// The reader mode of berth's program: `args` are what follows [`READER_ARG`] (the request
/// in JSON); the image is stdin. Answers on stdout and exits 0, or prints a
/// [`VolumeReadFailure`] on stderr and exits with its code.
pub fn reader_main(args: &[OsString]) -> i32 {
    let answered = parse_request(args).and_then(|request| {
        let image = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map(std::fs::File::from)
            .map_err(|e| unreadable(format!("cannot take the image from stdin: {e}")))?;
        let fs = crate::volume_reader::load_file(image)?;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        crate::volume_reader::answer(&fs, &request, &mut out)
    });
    match answered {
        Ok(()) => 0,
        Err(failure) => {
            let json = serde_json::to_string(&failure).expect("a failure serializes");
            let _ = writeln!(std::io::stderr(), "{json}");
            VolumeReadFailure::EXIT_CODE
        }
    }
}

fn parse_request(args: &[OsString]) -> Result<VolumeRead, VolumeReadFailure> {
    let [json] = args else {
        return Err(unreadable(
            "the volume reader takes one argument, its request in JSON".into(),
        ));
    };
    serde_json::from_str(&json.to_string_lossy())
        .map_err(|e| unreadable(format!("the volume reader's request is not valid: {e}")))
}

fn unreadable(message: String) -> VolumeReadFailure {
    VolumeReadFailure {
        kind: VolumeReadFailureKind::Unreadable,
        message,
    }
}
