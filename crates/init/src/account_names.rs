//! The box's names for user and group ids (`/etc/passwd`, `/etc/group` of the box's own
//! root), so a file's owner is shown as the box sees it. Read once per listing; a box
//! without the files, or an id they do not name, gets the number.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// The most of each file read: an account database larger than this is not a real box's.
const MAX_DB_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Default)]
pub struct AccountNames {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

impl AccountNames {
    pub fn load() -> Self {
        AccountNames {
            users: read_db(Path::new("/etc/passwd")),
            groups: read_db(Path::new("/etc/group")),
        }
    }

    pub fn user(&self, uid: u32) -> String {
        self.users
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| uid.to_string())
    }

    pub fn group(&self, gid: u32) -> String {
        self.groups
            .get(&gid)
            .cloned()
            .unwrap_or_else(|| gid.to_string())
    }
}

/// `name:x:id:…` lines: the first name of each id wins.
fn read_db(path: &Path) -> HashMap<u32, String> {
    let mut text = String::new();
    let read = std::fs::File::open(path)
        .and_then(|file| file.take(MAX_DB_BYTES).read_to_string(&mut text));
    if read.is_err() {
        return HashMap::new();
    }
    parse_db(&text)
}

fn parse_db(text: &str) -> HashMap<u32, String> {
    let mut names = HashMap::new();
    for line in text.lines() {
        let mut fields = line.split(':');
        let (Some(name), Some(_), Some(id)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if let Ok(id) = id.parse::<u32>() {
            names.entry(id).or_insert_with(|| name.to_owned());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_get_their_first_name_and_unknown_ones_their_number() {
        let names = AccountNames {
            users: parse_db("root:x:0:0::/root:/bin/sh\nuser:x:1001:1001::/home/user:/bin/bash\nalias:x:0:0:::\n# comment\nbroken"),
            groups: parse_db("root:x:0:\nuser:x:1001:"),
        };
        assert_eq!(names.user(0), "root");
        assert_eq!(names.user(1001), "user");
        assert_eq!(names.user(7), "7");
        assert_eq!(names.group(1001), "user");
    }
}
