//! The fake Anthropic Messages API (tests/support/fake_anthropic.rs) speaks the wire format
//! the real API does, so agents driven against it behave as they would in production.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::real_agents;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use real_agents::fake_anthropic::{FakeAnthropic, SIDE_ANSWER};
use real_agents::fake_model::{RequestKind, Script, Turn};
use serde_json::{Value, json};

/// A response read off the wire.
struct Response {
    status: u16,
    head: String,
    body: String,
}

impl Response {
    /// The `(event, data)` pairs of a server-sent-events body.
    fn events(&self) -> Vec<(String, Value)> {
        self.body
            .split("\n\n")
            .filter(|frame| !frame.trim().is_empty())
            .map(|frame| {
                let field = |name: &str| {
                    frame
                        .lines()
                        .find_map(|line| line.strip_prefix(name))
                        .unwrap_or_else(|| panic!("frame without {name:?}: {frame:?}"))
                        .to_owned()
                };
                let data = serde_json::from_str(&field("data: "))
                    .unwrap_or_else(|error| panic!("frame data is not JSON ({error}): {frame:?}"));
                (field("event: "), data)
            })
            .collect()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("body is not JSON ({error}): {:?}", self.body))
    }
}

/// Sends one HTTP/1.0 request (so the body is delimited by the connection closing).
fn send(fake: &FakeAnthropic, method: &str, path: &str, body: &str) -> Response {
    let mut stream = open(fake, method, path, body);
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read the response");
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("response without a header end: {raw:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("response without a status: {head:?}"));
    Response {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

fn open(fake: &FakeAnthropic, method: &str, path: &str, body: &str) -> TcpStream {
    let address = fake
        .base_url()
        .strip_prefix("http://")
        .expect("base URL is http");
    let mut stream = TcpStream::connect(address).expect("connect to the fake API");
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send the request");
    stream
}

/// A main-conversation request body (it offers a tool) with `prompt` as the user message.
/// A Messages API request body of the model `claude-test` (1024 tokens, streamed unless
/// `fields` say otherwise) with `fields`.
fn request(fields: Value) -> Value {
    let mut request = json!({ "model": "claude-test", "max_tokens": 1024, "stream": true });
    if let (Some(request), Value::Object(fields)) = (request.as_object_mut(), fields) {
        request.extend(fields);
    }
    request
}

fn main_request(prompt: &str, stream: bool) -> String {
    request(json!({
        "stream": stream,
        "tools": [{ "name": "Bash", "input_schema": { "type": "object" } }],
        "messages": [{ "role": "user", "content": [{ "type": "text", "text": prompt }] }],
    }))
    .to_string()
}

fn post_main(fake: &FakeAnthropic, prompt: &str) -> Response {
    send(
        fake,
        "POST",
        "/v1/messages?beta=true",
        &main_request(prompt, true),
    )
}

/// The text of a streamed answer: its `text_delta`s joined.
fn streamed_text(response: &Response) -> String {
    response
        .events()
        .iter()
        .filter_map(|(_, data)| {
            data.pointer("/delta/text")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

fn stop_reason(response: &Response) -> Option<String> {
    response.events().iter().find_map(|(event, data)| {
        (event == "message_delta")
            .then(|| {
                data.pointer("/delta/stop_reason")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .flatten()
    })
}

fn start(script: Script) -> FakeAnthropic {
    FakeAnthropic::start(script).expect("start the fake Anthropic API")
}

#[test]
fn text_turn_streams_the_events_of_the_real_api_in_order() {
    let fake = start(Script::new().task(
        "t-1",
        [Turn::text(
            "A long enough answer. <task-done>t-1</task-done>",
        )],
    ));

    let response = post_main(&fake, "Your task ID is: t-1");

    assert_eq!(response.status, 200);
    assert!(
        response
            .head
            .to_lowercase()
            .contains("content-type: text/event-stream")
    );
    let names: Vec<String> = response
        .events()
        .into_iter()
        .map(|(event, _)| event)
        .collect();
    let mut expected = vec!["message_start", "ping", "content_block_start"];
    expected.extend(std::iter::repeat_n("content_block_delta", names.len() - 6));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    assert!(names.len() > 7, "text arrives in several deltas");
    assert_eq!(
        streamed_text(&response),
        "A long enough answer. <task-done>t-1</task-done>"
    );
    assert_eq!(stop_reason(&response).as_deref(), Some("end_turn"));
}

#[test]
fn every_event_names_its_own_type() {
    let fake = start(Script::new().task("t-1", [Turn::text("hi")]));

    let response = post_main(&fake, "Your task ID is: t-1");

    for (event, data) in response.events() {
        assert_eq!(data["type"], event.as_str(), "{data}");
    }
}

#[test]
fn message_start_echoes_the_model_and_reports_usage() {
    let fake = start(Script::new().task("t-1", [Turn::text("hi")]));

    let events = post_main(&fake, "Your task ID is: t-1").events();

    let message = &events[0].1["message"];
    assert_eq!(message["model"], "claude-test");
    assert_eq!(message["role"], "assistant");
    assert!(message["usage"]["input_tokens"].as_u64() > Some(0));
}

#[test]
fn tool_use_turn_streams_its_input_as_json_deltas() {
    let fake = start(Script::new().task("t-1", [FakeAnthropic::bash("echo hi > proof.txt")]));

    let response = post_main(&fake, "Your task ID is: t-1");

    let events = response.events();
    let block = &events[2].1["content_block"];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], "Bash");
    let input: String = events
        .iter()
        .filter_map(|(_, data)| data.pointer("/delta/partial_json").and_then(Value::as_str))
        .collect();
    let input: Value = serde_json::from_str(&input).expect("the deltas join into JSON");
    assert_eq!(input["command"], "echo hi > proof.txt");
    assert_eq!(stop_reason(&response).as_deref(), Some("tool_use"));
}

#[test]
fn max_tokens_turn_stops_with_max_tokens() {
    let fake = start(Script::new().task("t-1", [Turn::max_tokens("cut off")]));

    let response = post_main(&fake, "Your task ID is: t-1");

    assert_eq!(stop_reason(&response).as_deref(), Some("max_tokens"));
}

#[test]
fn non_streaming_request_gets_one_message() {
    let fake = start(Script::new().task("t-1", [Turn::text("whole answer")]));

    let response = send(
        &fake,
        "POST",
        "/v1/messages",
        &main_request("Your task ID is: t-1", false),
    );

    let message = response.json();
    assert_eq!(message["type"], "message");
    assert_eq!(message["content"][0]["text"], "whole answer");
    assert_eq!(message["stop_reason"], "end_turn");
}

#[test]
fn main_requests_take_the_next_turn_and_the_last_one_repeats() {
    let fake = start(Script::new().task("t-1", [Turn::text("first"), Turn::text("second")]));

    let answers: Vec<String> = (0..3)
        .map(|_| streamed_text(&post_main(&fake, "Your task ID is: t-1")))
        .collect();

    assert_eq!(answers, ["first", "second", "second"]);
}

/// The answer to `prompt` of a fake scripted for both `tasks`, each answering "for TASK".
fn answer_among(tasks: [&str; 2], prompt: &str) -> String {
    let script = tasks.into_iter().fold(Script::new(), |script, task| {
        script.task(task, [Turn::text(format!("for {task}"))])
    });
    streamed_text(&post_main(&start(script), prompt))
}

#[test]
fn the_stated_task_id_chooses_the_script_over_other_ids_in_the_prompt() {
    let prompt = "# Task: Test it\n\nYour task ID is: write-test.\n\n\
                  ## Already done\n- Greeting (write-greeting)\n";

    let answer = answer_among(["write-greeting", "write-test"], prompt);

    assert_eq!(answer, "for write-test");
}

#[test]
fn without_a_stated_task_id_a_whole_token_in_the_prompt_chooses_the_script() {
    let answer = answer_among(["t-1", "t-10"], "Please work on t-10 now.");

    assert_eq!(answer, "for t-10");
}

#[test]
fn concurrent_tasks_each_follow_their_own_script() {
    let fake = start(
        Script::new()
            .task("alpha", [Turn::text("alpha 1"), Turn::text("alpha 2")])
            .task("beta", [Turn::text("beta 1"), Turn::text("beta 2")]),
    );

    let answers = [
        streamed_text(&post_main(&fake, "Your task ID is: alpha")),
        streamed_text(&post_main(&fake, "Your task ID is: beta")),
        streamed_text(&post_main(&fake, "Your task ID is: alpha")),
        streamed_text(&post_main(&fake, "Your task ID is: beta")),
    ];

    assert_eq!(answers, ["alpha 1", "beta 1", "alpha 2", "beta 2"]);
}

#[test]
fn prompts_without_a_script_get_the_fallback_turn() {
    let fake = start(
        Script::new()
            .task("t-1", [Turn::text("scripted")])
            .fallback([Turn::text("fallback")]),
    );

    let answer = streamed_text(&post_main(&fake, "no task ID here"));

    assert_eq!(answer, "fallback");
    assert_eq!(fake.requests()[0].kind, RequestKind::Main { key: None });
}

#[test]
fn side_requests_get_a_canned_answer_and_consume_no_turn() {
    let fake = start(Script::new().task("t-1", [Turn::text("main answer")]));
    let title_request = request(json!({
        "max_tokens": 64,
        "system": [{ "type": "text", "text": "Generate a concise title" }],
        "messages": [{ "role": "user", "content": "<session>Your task ID is: t-1</session>" }],
    }));

    let side = send(&fake, "POST", "/v1/messages", &title_request.to_string());
    let main = post_main(&fake, "Your task ID is: t-1");

    assert_eq!(streamed_text(&side), SIDE_ANSWER);
    assert_eq!(streamed_text(&main), "main answer");
    assert_eq!(fake.requests()[0].kind, RequestKind::Side);
}

#[test]
fn error_turn_answers_with_its_status_and_the_apis_error_body() {
    let fake = start(Script::new().task("t-1", [FakeAnthropic::overloaded()]));

    let response = post_main(&fake, "Your task ID is: t-1");

    assert_eq!(response.status, 529);
    let body = response.json();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "overloaded_error");
}

#[test]
fn count_tokens_answers_an_estimate() {
    let fake = start(Script::new());

    let response = send(
        &fake,
        "POST",
        "/v1/messages/count_tokens",
        &main_request("hello", false),
    );

    assert!(response.json()["input_tokens"].as_u64() > Some(0));
    assert_eq!(fake.requests()[0].kind, RequestKind::CountTokens);
}

#[test]
fn probes_are_answered_and_unknown_posts_are_not_found() {
    let fake = start(Script::new());

    let probe = send(&fake, "GET", "/", "");
    let unknown = send(&fake, "POST", "/v1/complete", "{}");

    assert_eq!(probe.status, 200);
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"]["type"], "not_found_error");
}

#[test]
fn recorded_requests_expose_prompt_and_tool_results() {
    let fake = start(Script::new().task("t-1", [Turn::text("ok")]));
    let body = request(json!({
        "tools": [{ "name": "Bash", "input_schema": { "type": "object" } }],
        "messages": [
            { "role": "user", "content": [{ "type": "text", "text": "Your task ID is: t-1" }] },
            { "role": "assistant", "content": [{ "type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {} }] },
            { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "toolu_1", "content": "hi", "is_error": false }] },
        ],
    }));

    send(&fake, "POST", "/v1/messages", &body.to_string());

    let request = &fake.main_requests("t-1")[0];
    assert_eq!(request.prompt_text(), "Your task ID is: t-1");
    assert_eq!(request.model(), Some("claude-test"));
    let results = request.tool_results();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].tool_use_id, "toolu_1");
    assert_eq!(results[0].content, "hi");
}

#[test]
fn hang_turn_streams_its_start_and_is_reported_as_hanging() {
    let fake = start(Script::new().task("t-1", [Turn::hang("Thinking")]));
    assert!(
        !fake.wait_until_hanging(Duration::ZERO),
        "nothing hangs before a request"
    );

    let mut stream = open(
        &fake,
        "POST",
        "/v1/messages",
        &main_request("Your task ID is: t-1", true),
    );
    let mut received = String::new();
    let mut buffer = [0_u8; 4096];
    while !received.contains("Thinking") {
        let read = stream.read(&mut buffer).expect("read the hanging response");
        assert_ne!(read, 0, "the hanging response ended: {received:?}");
        received.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }

    assert!(fake.wait_until_hanging(Duration::ZERO));
    assert!(!received.contains("message_stop"), "{received:?}");
}
