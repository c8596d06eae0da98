//! The calls of a box's services (protocol version 7): the daemons its template declares,
//! which `berth-init` starts and supervises. An older agent refuses each with
//! [`GuestError::Unsupported`] before anything is sent.

use berth_basics::path_segment;
use berth_protocol::guest::Call;
use berth_protocol::service::{ServiceInfo, ServiceList};
use bytes::Bytes;
use http::Method;

use super::{GuestClient, GuestError, NdjsonStream, ProcessOutput};

impl GuestClient {
    /// Every service of the box, in its template's order.
    pub async fn services(&self) -> Result<ServiceList, GuestError> {
        self.call_json(Call::ServiceList, Method::GET, "/v1/services", Bytes::new())
            .await
    }

    /// The service's log from `offset`, as `output` frames (no `exit`: a service's log
    /// goes on across its lives). Without `follow` the stream ends at the log's end; with
    /// it, it stays open for what comes next, until the agent ends it (the box stops).
    pub async fn service_logs(
        &self,
        name: &str,
        offset: u64,
        follow: bool,
    ) -> Result<ProcessOutput, GuestError> {
        let uri = format!(
            "{}?offset={offset}&follow={follow}",
            service_uri(name, "logs")
        );
        let response = self
            .send(Call::ServiceLogs, Method::GET, &uri, Bytes::new())
            .await?;
        Ok(NdjsonStream::new(response.into_body()))
    }

    /// Stops the service's running life (if any) and starts another at once; answers the
    /// service as it is then.
    pub async fn service_restart(&self, name: &str) -> Result<ServiceInfo, GuestError> {
        let uri = service_uri(name, "restart");
        self.call_json(Call::ServiceRestart, Method::POST, &uri, Bytes::new())
            .await
    }
}

/// `/v1/services/{name}/{verb}`. Names are `[a-z0-9-]`, but one that came from a caller is
/// encoded as one segment all the same, `/` included, so it can never name another path.
fn service_uri(name: &str, verb: &str) -> String {
    format!("/v1/services/{}/{verb}", path_segment(name))
}

#[cfg(test)]
mod tests {
    use super::service_uri;

    #[test]
    fn a_service_name_stays_one_segment() {
        assert_eq!(service_uri("web-1", "logs"), "/v1/services/web-1/logs");
        assert_eq!(
            service_uri("../v1/shutdown", "restart"),
            "/v1/services/..%2Fv1%2Fshutdown/restart"
        );
    }
}
