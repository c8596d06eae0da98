//! A box that misbehaves hurts only itself: fork bombs, too many processes, memory hogs,
//! a full volume. One file per limit (`limits/`), what they share in `fixtures.rs`.

#[path = "limits/fixtures.rs"]
mod fixtures;
#[path = "limits/memory.rs"]
mod memory;
#[path = "limits/processes.rs"]
mod processes;
#[path = "limits/under_attack.rs"]
mod under_attack;
#[path = "limits/volume.rs"]
mod volume;

pub use memory::{
    berth_init_is_outside_the_box_cgroup_and_the_oom_killers_reach,
    memory_hog_is_killed_and_the_box_survives,
};
pub use processes::{
    box_processes_cannot_lift_their_pids_limit, fork_bomb_is_contained, process_count_is_capped,
};
pub use under_attack::{
    the_host_reaches_a_box_through_its_fork_bomb, the_host_reaches_a_box_through_its_memory_hogs,
};
pub use volume::a_full_volume_leaves_the_box_working;
