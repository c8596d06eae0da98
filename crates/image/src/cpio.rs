//! A writer of uncompressed `newc` cpio archives, the format the kernel unpacks as an
//! initramfs: per entry a 110-byte ASCII header (`070701` and 13 eight-digit hex fields),
//! the NUL-terminated name padded to 4 bytes, the data padded to 4 bytes; `TRAILER!!!` last.
//! Every entry is owned by root with mtime 0, so the same inputs make the same bytes.

use std::io::{self, Read, Write};

const MAGIC: &str = "070701";
const TRAILER: &str = "TRAILER!!!";
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// Writes a newc archive to `W`, entry by entry. Parents must be written before children.
#[derive(Debug)]
pub struct CpioWriter<W: Write> {
    out: W,
    next_ino: u32,
    written: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Header {
    mode: u32,
    nlink: u32,
    filesize: u32,
    rdevmajor: u32,
    rdevminor: u32,
}

impl<W: Write> CpioWriter<W> {
    pub fn new(out: W) -> Self {
        CpioWriter {
            out,
            next_ino: 1,
            written: 0,
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// A directory; `mode` holds the permission bits.
    pub fn dir(&mut self, name: &str, mode: u32) -> io::Result<()> {
        self.entry(
            name,
            Header {
                mode: S_IFDIR | (mode & 0o7777),
                nlink: 2,
                ..Header::default()
            },
        )
    }

    /// A regular file holding `data`.
    pub fn file(&mut self, name: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        self.file_from(name, mode, data.len() as u64, data)
    }

    /// A regular file of `len` bytes read from `data` (which must yield exactly that many).
    pub fn file_from(
        &mut self,
        name: &str,
        mode: u32,
        len: u64,
        data: impl Read,
    ) -> io::Result<()> {
        let filesize =
            u32::try_from(len).map_err(|_| invalid("a cpio (newc) entry holds at most 4 GiB"))?;
        self.entry(
            name,
            Header {
                mode: S_IFREG | (mode & 0o7777),
                nlink: 1,
                filesize,
                ..Header::default()
            },
        )?;
        let copied = io::copy(&mut data.take(len), &mut self.out)?;
        if copied != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file was shorter than its length",
            ));
        }
        self.written += copied;
        self.pad()
    }

    /// A symbolic link to `target`.
    pub fn symlink(&mut self, name: &str, target: &str) -> io::Result<()> {
        let filesize = u32::try_from(target.len()).map_err(|_| invalid("link target too long"))?;
        self.entry(
            name,
            Header {
                mode: S_IFLNK | 0o777,
                nlink: 1,
                filesize,
                ..Header::default()
            },
        )?;
        self.put(target.as_bytes())?;
        self.pad()
    }

    /// A character device node (e.g. `dev/console`, 5:1), so PID 1 has a console before it
    /// mounts devtmpfs.
    pub fn char_device(&mut self, name: &str, mode: u32, major: u32, minor: u32) -> io::Result<()> {
        self.entry(
            name,
            Header {
                mode: S_IFCHR | (mode & 0o7777),
                nlink: 1,
                rdevmajor: major,
                rdevminor: minor,
                ..Header::default()
            },
        )
    }

    /// Writes the trailer and hands back the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.header(TRAILER, Header::default(), 0)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn entry(&mut self, name: &str, header: Header) -> io::Result<()> {
        let name = name.trim_start_matches('/');
        if name.is_empty() || name.contains('\0') || name == TRAILER {
            return Err(invalid("a cpio entry name must be non-empty, without NUL"));
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.header(name, header, ino)
    }

    fn header(&mut self, name: &str, h: Header, ino: u32) -> io::Result<()> {
        let namesize = name.len() as u32 + 1;
        let fields = [
            ino,
            h.mode,
            0,
            0,
            h.nlink,
            0,
            h.filesize,
            0,
            0,
            h.rdevmajor,
            h.rdevminor,
            namesize,
            0,
        ];
        let mut head = String::with_capacity(110);
        head.push_str(MAGIC);
        for f in fields {
            head.push_str(&format!("{f:08X}"));
        }
        debug_assert_eq!(head.len(), 110);
        self.put(head.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Pads to the next multiple of 4 from the archive's start.
    fn pad(&mut self) -> io::Result<()> {
        let n = (4 - (self.written % 4) as usize) % 4;
        self.put(&[0u8; 3][..n])
    }
}

fn invalid(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

#[cfg(test)]
pub(crate) mod parse {
    //! A newc reader for tests: the inverse of the writer.

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Entry {
        pub name: String,
        pub mode: u32,
        pub uid: u32,
        pub rdev: (u32, u32),
        pub data: Vec<u8>,
    }

    pub fn entries(mut buf: &[u8]) -> Vec<Entry> {
        let total = buf.len();
        let mut out = Vec::new();
        loop {
            assert_eq!(&buf[..6], b"070701", "magic at {}", total - buf.len());
            let field = |i: usize| {
                let s = std::str::from_utf8(&buf[6 + i * 8..6 + (i + 1) * 8]).unwrap();
                u32::from_str_radix(s, 16).unwrap()
            };
            let (mode, uid, filesize, namesize) = (field(1), field(2), field(6), field(11));
            let rdev = (field(9), field(10));
            let name_end = 110 + namesize as usize;
            let name = std::str::from_utf8(&buf[110..name_end - 1])
                .unwrap()
                .to_string();
            assert_eq!(buf[name_end - 1], 0);
            let off = |pos: usize| pos + (4 - (total - buf.len() + pos) % 4) % 4;
            let data_start = off(name_end);
            let data_end = data_start + filesize as usize;
            let data = buf[data_start..data_end].to_vec();
            let next = off(data_end);
            if name == "TRAILER!!!" {
                assert!(buf[next..].is_empty(), "bytes after the trailer");
                return out;
            }
            out.push(Entry {
                name,
                mode,
                uid,
                rdev,
                data,
            });
            buf = &buf[next..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = CpioWriter::new(Vec::new());
        w.dir("/dev", 0o755).unwrap();
        w.char_device("dev/console", 0o600, 5, 1).unwrap();
        w.file("/init", 0o755, b"#!/bin/sh\necho hi\n").unwrap();
        w.file("a", 0o644, b"").unwrap();
        w.file("ab", 0o644, b"x").unwrap();
        w.symlink("sh", "/init").unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn round_trips_through_a_parser() {
        let bytes = sample();
        assert_eq!(bytes.len() % 4, 0);
        let entries = parse::entries(&bytes);
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["dev", "dev/console", "init", "a", "ab", "sh"]);
        assert_eq!(entries[0].mode, 0o40755);
        assert_eq!((entries[1].mode, entries[1].rdev), (0o20600, (5, 1)));
        assert_eq!(entries[2].mode, 0o100755);
        assert_eq!(entries[2].data, b"#!/bin/sh\necho hi\n");
        assert_eq!(entries[4].data, b"x");
        assert_eq!(
            (entries[5].mode, &entries[5].data[..]),
            (0o120777, &b"/init"[..])
        );
        assert!(entries.iter().all(|e| e.uid == 0));
        // Deterministic.
        assert_eq!(bytes, sample());
    }

    #[test]
    fn round_trips_through_system_cpio_when_present() {
        let Some(cpio) = ["/usr/bin/cpio", "/bin/cpio"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
        else {
            berth_testkit::skip("cpio", "no system cpio (the parser test covers the format)");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("a.cpio");
        std::fs::write(&archive, sample()).unwrap();
        let out = std::process::Command::new(cpio)
            .args(["-i", "--quiet", "--no-absolute-filenames", "-F"])
            .arg(&archive)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            std::fs::read(dir.path().join("init")).unwrap(),
            b"#!/bin/sh\necho hi\n"
        );
        assert_eq!(
            std::fs::read_link(dir.path().join("sh")).unwrap().to_str(),
            Some("/init")
        );
    }

    #[test]
    fn bad_names_and_short_readers_are_errors() {
        let mut w = CpioWriter::new(Vec::new());
        assert!(w.file("", 0o644, b"").is_err());
        assert!(w.file("a\0b", 0o644, b"").is_err());
        assert!(w.file("TRAILER!!!", 0o644, b"").is_err());
        let short: &[u8] = b"abc";
        assert!(w.file_from("f", 0o644, 10, short).is_err());
    }
}
