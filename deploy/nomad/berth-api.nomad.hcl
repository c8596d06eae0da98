# The API: stateless replicas (auth, placement, routing; singleton jobs under a lease row),
# every record in PostgreSQL. Any replica can serve any request, so losing one loses nothing.
#
# The secrets come from Nomad Variables at this job's own path, which only this job's tasks
# may read (nodes have their own, without the CA's key):
#   nomad var put nomad/jobs/berth-api store_password=... ca_crt=@ca.crt ca_key=@ca.key
#
# PostgreSQL is not deployed here: register yours as the Nomad service `postgres`.
job "berth-api" {
  type = "service"

  update {
    # A new replica is healthy before an old one goes: the canary starts beside the old
    # ones, is promoted once its checks pass, and the rest follow one at a time.
    max_parallel      = 1
    canary            = 1
    auto_promote      = true
    auto_revert       = true
    health_check      = "checks"
    min_healthy_time  = "10s"
    healthy_deadline  = "3m"
    progress_deadline = "10m"
  }

  group "api" {
    count = 2

    # Replicas on different machines where there are several; unlike a distinct_hosts
    # constraint, this still places both on a single machine.
    spread {
      attribute = "${node.unique.id}"
    }

    network {
      port "http" {
        to = 7070
      }
    }

    service {
      name     = "berth-api"
      provider = "nomad"
      port     = "http"

      # Inside the cluster the API serves plain HTTP; clients come through a load
      # balancer that terminates TLS (or give the API --tls-cert/--tls-key).
      check {
        type            = "http"
        path            = "/v1/health"
        interval        = "10s"
        timeout         = "3s"
      }
    }

    task "berth-api" {
      driver = "docker"

      # Time for in-flight requests and event streams to finish.
      kill_timeout = "30s"

      config {
        image   = "ghcr.io/berth-dev/berth:latest"
        command = "berth"
        ports   = ["http"]
        args = [
          "up",
          "--role", "api",
          "--store", "postgres://berth@${BERTH_STORE_ADDR}/berth",
          "--listen", "0.0.0.0:7070",
          "--cluster-dir", "${NOMAD_SECRETS_DIR}/cluster",
          # Scratch only: every record the API keeps is in PostgreSQL.
          "--data-dir", "${NOMAD_TASK_DIR}/data",
        ]
      }

      # The password reaches berth through the environment, never the URL (argv is
      # readable in /proc by anyone on the machine). The template waits until PostgreSQL
      # is registered, and restarts the task when it moves.
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/berth-api" }}BERTH_STORE_PASSWORD={{ .store_password | toJSON }}{{ end }}
          {{ range $i, $s := nomadService "postgres" }}{{ if eq $i 0 }}BERTH_STORE_ADDR={{ $s.Address }}:{{ $s.Port }}{{ end }}{{ end }}
        EOT
        destination = "secrets/berth.env"
        env         = true
        change_mode = "restart"
      }

      # The API holds the CA's key: it signs the certificates of joining nodes.
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/berth-api" }}{{ .ca_crt }}{{ end }}
        EOT
        destination = "secrets/cluster/ca.crt"
        perms       = "0400"
        change_mode = "restart"
      }

      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/berth-api" }}{{ .ca_key }}{{ end }}
        EOT
        destination = "secrets/cluster/ca.key"
        perms       = "0400"
        change_mode = "restart"
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
