//! What a runtime needs to know to start a box.

use std::collections::BTreeMap;
use std::fmt;

use berth_protocol::harness::HarnessConfig;
use berth_protocol::BoxId;

/// Everything a backend needs to boot one box.
#[derive(Debug, Clone)]
pub struct BoxSpec {
    pub id: BoxId,
    /// The box's hostname (its name: a DNS label).
    pub hostname: String,
    pub rootfs: Rootfs,
    pub limits: Limits,
    /// Minted by the host for this boot; every guest-channel call must carry it.
    pub boot_token: BootToken,
    /// Where box uids land on the host.
    pub id_map: IdMap,
    /// Read-only shared layers (harness, skills), mounted over the rootfs.
    pub layers: Vec<Layer>,
    /// The agent program `berth-init` runs and feeds messages to; `None`: no harness.
    pub harness: Option<HarnessConfig>,
    /// What the box sees of its egress: pinned names and the trust bundle.
    pub egress: EgressSetup,
    /// Size of the box's volume (a VM's volume image; grown, never shrunk, when it rises).
    pub disk_mib: u64,
    /// The box's own environment for this boot (the placeholders of its credential rules),
    /// given to every process `berth-init` starts. Never a real secret.
    pub env: BTreeMap<String, String>,
    /// How `/memory` is seeded on the volume's first boot; `None`: the default layout.
    pub memory: Option<berth_protocol::memory::MemoryLayout>,
    /// The template's services, which `berth-init` starts before the harness and
    /// supervises (validated by the host); empty: none.
    pub services: Vec<berth_protocol::service::ServiceConfig>,
}

/// The box's side of its egress (ARCHITECTURE.md "Egress"). The gateway itself runs on the
/// host and serves the listener [`crate::Runtime::start`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressSetup {
    /// Exact host names the box's `/etc/hosts` pins to 127.0.0.1, where `berth-init`
    /// forwards port 443 to the gateway (wildcard entries of an allowlist cannot be pinned;
    /// they are reached through the CONNECT proxy).
    pub pinned_hosts: Vec<String>,
    /// PEM of the box's interception CA, added to the host's CAs in the box's trust bundle
    /// (`berth_protocol::guest::BOX_CA_BUNDLE`). `None`: the host's CAs only.
    pub ca_pem: Option<String>,
}

/// A read-only shared layer: a host directory mounted at `target` in the box.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub source: std::path::PathBuf,
    /// Absolute path inside the box, e.g. `/opt/harness`.
    pub target: String,
}

/// The box's root filesystem, shared read-only by every box of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rootfs {
    /// The host's own `/usr`, bound read-only, with a minimal `/etc` of berth's own.
    /// Instant; sandbox only.
    Host,
    /// A read-only ext4 image of a template's root filesystem (`berth_image`): a VM's
    /// root disk, or the sandbox's loop-mounted, idmapped read-only root.
    Image(std::path::PathBuf),
}

/// A box volume's size when neither the template nor the box says.
pub const DEFAULT_DISK_MIB: u64 = 1024;

/// Resource limits of one box.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub memory_mib: u64,
    pub pids: u64,
    pub cpus: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mib: 512,
            pids: 256,
            cpus: 1.0,
        }
    }
}

/// Box uids and gids `0..SIZE` map to host ids `host_base..host_base + SIZE`.
/// Each box gets its own range, so box root of one box is not box root of another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMap {
    pub host_base: u32,
}

impl IdMap {
    pub const SIZE: u32 = 65536;
    /// Host ids below this are left to the host's own users.
    const FIRST_BASE: u32 = 1 << 20;
    /// How many distinct boxes can have a range.
    pub const SLOTS: u32 = (u32::MAX - Self::FIRST_BASE) / Self::SIZE;

    /// The range of box number `slot` (stable for the box's life; the store hands it out).
    /// `None` when the slot is past [`IdMap::SLOTS`].
    pub fn for_slot(slot: u32) -> Option<IdMap> {
        (slot < Self::SLOTS).then(|| IdMap {
            host_base: Self::FIRST_BASE + slot * Self::SIZE,
        })
    }

    /// The host uid of box uid `box_uid`.
    pub fn host_id(&self, box_id: u32) -> u32 {
        self.host_base + box_id
    }
}

/// The boot token: 256 random bits, hex. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct BootToken(String);

impl BootToken {
    /// A token from 32 random bytes (callers pass bytes from the OS random source).
    pub fn from_random(random: [u8; 32]) -> Self {
        BootToken(berth_basics::hex(&random))
    }

    /// A token as [`BootToken::as_str`] spells it (64 lowercase hex digits), as the store
    /// and a VM's config disk keep it; `None` for anything this code did not write.
    pub fn from_hex(hex: &str) -> Option<BootToken> {
        if hex.len() != 64 {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        let token = BootToken::from_random(bytes);
        // Upper-case digits would decode but not round-trip: not a token berth wrote.
        (token.as_str() == hex).then_some(token)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for BootToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BootToken(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_from_their_hex_and_nothing_else_does() {
        let token = BootToken::from_random([0x5a; 32]);
        assert_eq!(BootToken::from_hex(token.as_str()), Some(token.clone()));
        assert_eq!(BootToken::from_hex(&token.as_str().to_uppercase()), None);
        assert_eq!(BootToken::from_hex("abc"), None);
        assert_eq!(BootToken::from_hex(&"zz".repeat(32)), None);
        assert_eq!(BootToken::from_hex(&"é".repeat(32)), None);
        assert_eq!(BootToken::from_hex(&"G".repeat(64)), None);
    }

    #[test]
    fn id_ranges_never_overlap_and_stay_in_u32() {
        let a = IdMap::for_slot(0).unwrap();
        let b = IdMap::for_slot(1).unwrap();
        assert!(a.host_id(IdMap::SIZE - 1) < b.host_base);
        let last = IdMap::for_slot(IdMap::SLOTS - 1).unwrap();
        assert!(last.host_base.checked_add(IdMap::SIZE - 1).is_some());
        assert!(IdMap::for_slot(IdMap::SLOTS).is_none());
        assert!(a.host_base >= 1 << 20);
    }

    #[test]
    fn tokens_are_64_hex_chars_and_not_debug_printed() {
        let t = BootToken::from_random([0xab; 32]);
        assert_eq!(t.as_str().len(), 64);
        assert!(!format!("{t:?}").contains("ab"));
    }
}
