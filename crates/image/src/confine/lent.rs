//! The files a confined tool works on are lent to [`TOOL_UID`] for the run and given back
//! after, to berth's own ids with the mode they had.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use super::{Bind, TOOL_UID};
use crate::error::io;
use crate::ImageError;

/// Each file lent to the tool, with its permission bits before the run; given back on drop.
#[derive(Debug, Default)]
pub(super) struct Lent {
    files: Vec<(PathBuf, u32)>,
}

impl Lent {
    pub(super) fn to_tool(binds: &[Bind]) -> Result<Lent, ImageError> {
        let mut lent = Lent::default();
        for bind in binds {
            let meta = std::fs::metadata(&bind.host).map_err(io("stat", &bind.host))?;
            lent.files.push((bind.host.clone(), meta.mode() & 0o777));
            std::os::unix::fs::chown(&bind.host, Some(TOOL_UID), Some(TOOL_UID))
                .map_err(io("lend (chown) to the confined tool", &bind.host))?;
        }
        Ok(lent)
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // To berth's own ids (not the owner seen before the run, which a daemon killed
        // mid-run would have left as the tool's), with the mode it had: the tool cannot
        // change the mode or xattrs itself (seccomp), this is for certainty.
        // SAFETY: geteuid and getegid have no arguments and cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        for (path, mode) in &self.files {
            let back = std::os::unix::fs::chown(path, Some(uid), Some(gid)).and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode))
            });
            if let Err(e) = back {
                eprintln!(
                    "berth: could not give {} back to {uid}:{gid}: {e}",
                    path.display()
                );
            }
        }
    }
}
