//! The calls of processes that outlive their request (protocol version 3).

use berth_protocol::guest::Call;
use berth_protocol::process::{ProcessFrame, ProcessInfo, ProcessList, ProcessRequest};
use berth_protocol::terminal::SignalRequest;
use bytes::Bytes;
use http::Method;

use super::{percent_encode, GuestClient, GuestError, NdjsonStream, Upload};

/// A process's output frames as they come. Dropping it only stops reading.
pub type ProcessOutput = NdjsonStream<ProcessFrame>;

impl GuestClient {
    /// Starts a process that runs on whoever watches; answers at once.
    pub async fn process_start(&self, req: &ProcessRequest) -> Result<ProcessInfo, GuestError> {
        let body = Bytes::from(serde_json::to_vec(req)?);
        self.call_json(Call::ProcessStart, Method::POST, "/v1/processes", body)
            .await
    }

    /// Starts a process and follows its output from its first byte: one round trip where
    /// the agent speaks protocol 6 (`POST /v1/processes?follow=true`), a start and then a
    /// follow with an older one.
    pub async fn process_start_followed(
        &self,
        req: &ProcessRequest,
    ) -> Result<(ProcessInfo, ProcessOutput), GuestError> {
        if self.agreed_version().await? < Call::ProcessStartFollowed.introduced_in() {
            let info = self.process_start(req).await?;
            let output = self.process_output(&info.id, 0).await?;
            return Ok((info, output));
        }
        let body = Bytes::from(serde_json::to_vec(req)?);
        let response = self
            .send(
                Call::ProcessStartFollowed,
                Method::POST,
                "/v1/processes?follow=true",
                body,
            )
            .await?;
        let mut answer = NdjsonStream::<ProcessInfo>::new(response.into_body());
        let info = answer.next_frame().await?.ok_or(GuestError::Cut {
            what: "started process's info",
        })?;
        Ok((info, answer.retype()))
    }

    pub async fn processes(&self) -> Result<ProcessList, GuestError> {
        self.call_json(
            Call::ProcessList,
            Method::GET,
            "/v1/processes",
            Bytes::new(),
        )
        .await
    }

    /// The output from `offset`, then the exit.
    pub async fn process_output(&self, id: &str, offset: u64) -> Result<ProcessOutput, GuestError> {
        let uri = format!(
            "/v1/processes/{}/output?offset={offset}",
            percent_encode(id)
        );
        let response = self
            .send(Call::ProcessOutput, Method::GET, &uri, Bytes::new())
            .await?;
        Ok(NdjsonStream::new(response.into_body()))
    }

    /// Connects for a write to the process's stdin; [`Upload::send`] streams the bytes
    /// (any length), then stdin is closed when `close`.
    pub async fn process_stdin(&self, id: &str, close: bool) -> Result<Upload, GuestError> {
        self.require(Call::ProcessStdin).await?;
        let uri = format!("/v1/processes/{}/stdin?close={close}", percent_encode(id));
        Ok(Upload {
            sender: self.connection().await?,
            request: self.builder(Method::POST, &uri),
            limit: None,
        })
    }

    pub async fn process_signal(&self, id: &str, signal: &str) -> Result<(), GuestError> {
        let uri = format!("/v1/processes/{}/signal", percent_encode(id));
        let body = Bytes::from(serde_json::to_vec(&SignalRequest {
            signal: signal.to_owned(),
        })?);
        self.send(Call::ProcessSignal, Method::POST, &uri, body)
            .await
            .map(drop)
    }
}
