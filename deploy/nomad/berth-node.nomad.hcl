# One `berth node` on every Nomad client: it runs the boxes (sandboxes and microVMs), their
# egress and volumes, and reports them to PostgreSQL under its lease.
#
# The clients' docker plugin must allow what a node needs:
#   plugin "docker" { config { allow_privileged = true  volumes { enabled = true } } }
# and their max_kill_timeout (30s by default) must be at least this job's kill_timeout.
#
# The secrets come from Nomad Variables at this job's own path, which only this job's tasks
# may read (the API's job has its own, with the CA's key; this one never holds it):
#   nomad var put nomad/jobs/berth-node store_password=... join_token=... ca_crt=@ca.crt
#
# PostgreSQL is not deployed here: register yours as the Nomad service `postgres`.
job "berth-node" {
  type = "system"

  update {
    # One machine's boxes stop at a time.
    max_parallel     = 1
    min_healthy_time = "10s"
    healthy_deadline = "5m"
  }

  group "node" {
    network {
      mode = "host"
      port "peer" {
        static = 7443
      }
      port "status" {
        static = 7071
      }
    }

    # The plain status listener: the peer port speaks mTLS.
    service {
      name     = "berth-node"
      provider = "nomad"
      port     = "status"

      check {
        type     = "http"
        path     = "/v1/health"
        interval = "10s"
        timeout  = "3s"
      }
    }

    task "berth-node" {
      driver = "docker"

      # Time for the node to stop its boxes cleanly (flush volumes, write their state)
      # before Nomad kills whatever is left.
      kill_timeout = "60s"

      config {
        image   = "ghcr.io/berth-dev/berth:latest"
        command = "berth"
        args = [
          "node",
          "--store", "postgres://berth@${BERTH_STORE_ADDR}/berth",
          "--data-dir", "/var/lib/berth",
          "--listen", "0.0.0.0:7443",
          "--status-listen", "0.0.0.0:7071",
          "--advertise", "${attr.unique.network.ip-address}:7443",
          "--name", "${node.unique.name}",
          "--join", "${BERTH_JOIN_URL}",
          "--join-token-file", "${NOMAD_SECRETS_DIR}/join/token",
          "--cluster-ca", "${NOMAD_SECRETS_DIR}/cluster/ca.crt",
        ]

        # Mounts, loop devices, namespaces, cgroups, KVM and the jailer's setup all need the
        # full set of capabilities and the host's devices.
        privileged = true
        # Boxes' ports, egress and the node's peer address are the machine's own.
        network_mode = "host"

        volumes = [
          # Box volumes, images and snapshots outlive the task: an upgrade or a restart
          # finds the machine's boxes where it left them.
          "/var/lib/berth:/var/lib/berth",
          # The host's whole /dev rather than /dev/kvm alone: Docker refuses a bind mount
          # whose source is missing, and machines without KVM still run sandboxes. /dev
          # holds /dev/kvm where it exists, and the loop devices attached after the start.
          "/dev:/dev",
        ]
      }

      # The password reaches berth through the environment, never the URL (argv is
      # readable in /proc by anyone on the machine). The template waits until PostgreSQL
      # and an API replica are registered, and restarts the task when they move.
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/berth-node" }}BERTH_STORE_PASSWORD={{ .store_password | toJSON }}{{ end }}
          {{ range $i, $s := nomadService "postgres" }}{{ if eq $i 0 }}BERTH_STORE_ADDR={{ $s.Address }}:{{ $s.Port }}{{ end }}{{ end }}
          {{ range $i, $s := nomadService "berth-api" }}{{ if eq $i 0 }}BERTH_JOIN_URL=http://{{ $s.Address }}:{{ $s.Port }}{{ end }}{{ end }}
        EOT
        destination = "secrets/berth.env"
        env         = true
        change_mode = "restart"
      }

      # The CA's certificate only: a node verifies the API and its peers, it never signs.
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/berth-node" }}{{ .ca_crt }}{{ end }}
        EOT
        destination = "secrets/cluster/ca.crt"
        perms       = "0400"
        change_mode = "restart"
      }

      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/berth-node" }}{{ .join_token }}{{ end }}
        EOT
        destination = "secrets/join/token"
        perms       = "0400"
        change_mode = "noop"
      }

      # Docker makes `memory` the container's hard limit, and the boxes run inside the
      # container's cgroup: this caps every box on the machine together. Size it for the boxes
      # a machine should hold (the reservation also keeps other jobs off that memory).
      resources {
        cpu    = 1000
        memory = 8192
      }
    }
  }
}
