//! gRPC server reflection, asked by tonic-reflection's own client as grpcurl asks it: the
//! README's recipe (`list`, `describe`, a `ShouldRateLimit` call whose JSON body and answer
//! are the README's) done against the server on a loopback port; and the descriptors it
//! serves (`src/rls_descriptors.bin`) checked against the envoy-types they come from.

#[path = "support/envoy_protos.rs"]
mod envoy_protos;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use prost_reflect::prost_types::FileDescriptorProto;
use prost_reflect::{DescriptorPool, DynamicMessage};
use tokio::sync::oneshot;
use tollgate_rls::config::Config;
use tollgate_rls::service::{Service, Settings};
use tollgate_rls::store::{ManualClock, Memory};
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

const SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";
const RLS_PROTO: &str = "envoy/service/ratelimit/v3/rls.proto";

/// The README's section "Calling it by hand".
fn readme_section() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("## Calling it by hand")
        .expect("README.md has a section \"Calling it by hand\"");
    let rest = &readme[start + 2..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
}

/// The body of the first fenced block of `kind` in `text` after `after` (its info string
/// may go on after the kind: `sh no-run: <why>`).
fn block(text: &str, kind: &str, after: &str) -> String {
    let text = &text[text.find(after).unwrap_or_else(|| panic!("no {after:?}"))..];
    let open = format!("```{kind}");
    let at = text
        .match_indices(&open)
        .map(|(i, _)| i)
        .find(|&i| matches!(text[i + open.len()..].chars().next(), Some('\n' | ' ')))
        .unwrap_or_else(|| panic!("no ```{kind} block"));
    let start = at + text[at..].find('\n').unwrap() + 1;
    text[start..start + text[start..].find("```").unwrap()].to_string()
}

/// The server on a free loopback port over `yaml`, on a clock at the start of a day.
async fn start(yaml: &str) -> (String, oneshot::Sender<()>) {
    let config = Config::from_texts([("README.md", yaml)]).expect("the README's config loads");
    let store = Memory::with_clock(ManualClock::new(19_675 * 86_400 * 1_000_000_000));
    let service = Arc::new(Service::new(config, store, Settings::default()));
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", grpc.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let grace = std::time::Duration::from_secs(5);
    tokio::spawn(tollgate_rls::run(
        service, grpc, http, None, shutdown, grace,
    ));
    (addr, stop)
}

/// One reflection question on its own stream, and its answer.
async fn ask(
    client: &mut ServerReflectionClient<tonic::transport::Channel>,
    q: MessageRequest,
) -> MessageResponse {
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(q),
    };
    let mut answers = client
        .server_reflection_info(tonic::codegen::tokio_stream::once(request))
        .await
        .expect("reflection answers")
        .into_inner();
    let answer = answers.message().await.unwrap().expect("one answer");
    answer.message_response.expect("a message response")
}

/// The encoded files of a `FileDescriptorResponse`.
fn files(answer: MessageResponse) -> Vec<Vec<u8>> {
    match answer {
        MessageResponse::FileDescriptorResponse(f) => f.file_descriptor_proto,
        other => panic!("not a file descriptor response: {other:?}"),
    }
}

#[tokio::test]
async fn the_readme_recipe_lists_describes_and_calls_the_service_by_reflection() {
    let section = readme_section();
    let (addr, stop) = start(&block(&section, "yaml", "")).await;
    let channel = tonic::transport::Channel::from_shared(addr.clone()).unwrap();
    let mut client = ServerReflectionClient::new(channel.connect().await.unwrap());

    // `grpcurl list`
    let services = match ask(&mut client, MessageRequest::ListServices(String::new())).await {
        MessageResponse::ListServicesResponse(l) => l.service.into_iter().map(|s| s.name),
        other => panic!("not a service list: {other:?}"),
    };
    let services: BTreeSet<String> = services.collect();
    println!("list: {services:?}");
    for want in [
        SERVICE,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(services.contains(want), "{want} not listed: {services:?}");
        assert!(section.contains(want), "the README's list lacks {want}");
    }

    // `grpcurl describe`: the file defining the service, then each import by name, until
    // every file is known (as grpcurl builds its descriptors).
    let rls = files(
        ask(
            &mut client,
            MessageRequest::FileContainingSymbol(SERVICE.into()),
        )
        .await,
    );
    let mut known: Vec<Vec<u8>> = Vec::new();
    let mut names = BTreeSet::new();
    let mut todo = rls;
    while let Some(raw) = todo.pop() {
        let file = FileDescriptorProto::decode(raw.as_slice()).unwrap();
        if !names.insert(file.name().to_string()) {
            continue;
        }
        for dep in &file.dependency {
            if !names.contains(dep) {
                todo.extend(files(
                    ask(&mut client, MessageRequest::FileByFilename(dep.clone())).await,
                ));
            }
        }
        known.push(raw);
    }
    assert!(names.contains(RLS_PROTO), "{names:?}");
    let mut pool = DescriptorPool::new();
    let set = prost_reflect::prost_types::FileDescriptorSet {
        file: known
            .iter()
            .map(|r| FileDescriptorProto::decode(r.as_slice()).unwrap())
            .collect(),
    };
    pool.add_file_descriptor_set(set)
        .expect("the served files resolve");
    let service = pool
        .get_service_by_name(SERVICE)
        .expect("the service resolves");
    let method = service
        .methods()
        .find(|m| m.name() == "ShouldRateLimit")
        .unwrap();
    assert_eq!(
        method.input().full_name(),
        "envoy.service.ratelimit.v3.RateLimitRequest"
    );
    assert_eq!(
        method.output().full_name(),
        "envoy.service.ratelimit.v3.RateLimitResponse"
    );

    // The call: the README's `-d` body read as the request by the reflected descriptors, the
    // answer printed in the proto3 JSON mapping as grpcurl prints it.
    let call = block(&section, "sh", "ShouldRateLimit");
    let body = call
        .split("-d '")
        .nth(1)
        .unwrap()
        .split('\'')
        .next()
        .unwrap();
    let mut de = serde_json::Deserializer::from_str(body);
    let request = DynamicMessage::deserialize(method.input(), &mut de).expect("the README's body");
    let request = RateLimitRequest::decode(request.encode_to_vec().as_slice()).unwrap();
    let mut rls = RateLimitServiceClient::connect(addr).await.unwrap();
    let mut answers = Vec::new();
    for _ in 0..6 {
        let answer = rls
            .should_rate_limit(request.clone())
            .await
            .unwrap()
            .into_inner();
        answers.push(print(&method.output(), &answer));
    }
    println!("{}", answers.join("\n"));
    let shown = block(&section, "json", "answers");
    assert_eq!(answers[0].trim(), shown.trim(), "the README's first answer");
    assert!(
        answers[4].contains("\"overallCode\": \"OK\""),
        "{}",
        answers[4]
    );
    assert!(
        answers[5].contains("\"overallCode\": \"OVER_LIMIT\""),
        "{}",
        answers[5]
    );
    let _ = stop.send(());
}

#[tokio::test]
async fn reflection_v1alpha_lists_the_service_for_older_clients() {
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient as Alpha;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest as Q;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse as A;
    let (addr, stop) = start(&block(&readme_section(), "yaml", "")).await;
    let channel = tonic::transport::Channel::from_shared(addr).unwrap();
    let mut client = Alpha::new(channel.connect().await.unwrap());
    let request = tonic_reflection::pb::v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(Q::ListServices(String::new())),
    };
    let mut answers = client
        .server_reflection_info(tonic::codegen::tokio_stream::once(request))
        .await
        .expect("v1alpha reflection answers")
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap().message_response;
    let Some(A::ListServicesResponse(list)) = answer else {
        panic!("not a service list: {answer:?}")
    };
    assert!(list.service.iter().any(|s| s.name == SERVICE), "{list:?}");
    let _ = stop.send(());
}

/// `answer` in the proto3 JSON mapping, pretty, as grpcurl prints it.
fn print(descriptor: &prost_reflect::MessageDescriptor, answer: &RateLimitResponse) -> String {
    let message =
        DynamicMessage::decode(descriptor.clone(), answer.encode_to_vec().as_slice()).unwrap();
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::pretty(&mut out);
    serde::Serialize::serialize(&message, &mut ser).unwrap();
    String::from_utf8(out).unwrap()
}

/// The files of an encoded `FileDescriptorSet`, each as its own bytes (field 1, length
/// delimited, repeated; decoding and encoding again would drop the options prost does not
/// know, such as the validation rules).
fn split(mut set: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while !set.is_empty() {
        assert_eq!(set[0], 0x0a, "a FileDescriptorSet holds only its files");
        set = &set[1..];
        let len = prost::encoding::decode_varint(&mut set).unwrap() as usize;
        out.push(&set[..len]);
        set = &set[len..];
    }
    out
}

/// `root` and every file it imports, transitively, from `set`, imports first, as an encoded
/// `FileDescriptorSet`.
fn closure(set: &[u8], root: &str) -> Vec<u8> {
    let files: Vec<(FileDescriptorProto, &[u8])> = split(set)
        .into_iter()
        .map(|raw| (FileDescriptorProto::decode(raw).unwrap(), raw))
        .collect();
    fn visit(
        name: &str,
        files: &[(FileDescriptorProto, &[u8])],
        done: &mut Vec<String>,
        out: &mut Vec<u8>,
    ) {
        if done.iter().any(|d| d == name) {
            return;
        }
        done.push(name.to_string());
        let (file, raw) = files.iter().find(|(f, _)| f.name() == name).unwrap();
        for dep in &file.dependency {
            visit(dep, files, done, out);
        }
        prost::encoding::bytes::encode(1, &raw.to_vec(), out);
    }
    let mut out = Vec::new();
    visit(root, &files, &mut Vec::new(), &mut out);
    out
}

#[test]
fn the_served_descriptors_are_envoy_types_rls_proto_and_its_imports() {
    let want = closure(
        &std::fs::read(envoy_protos::descriptors_path()).unwrap(),
        RLS_PROTO,
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/rls_descriptors.bin");
    if std::env::var_os("TOLLGATE_BLESS").is_some() {
        // The crate embeds the file when it compiles: the next run checks what was written.
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let names = |set: &[u8]| -> Vec<String> {
        split(set)
            .iter()
            .map(|raw| {
                FileDescriptorProto::decode(*raw)
                    .unwrap()
                    .name()
                    .to_string()
            })
            .collect()
    };
    println!(
        "{} files, {} bytes: {:?}",
        names(&want).len(),
        want.len(),
        names(&want)
    );
    assert_eq!(
        names(tollgate_rls::RLS_DESCRIPTORS),
        names(&want),
        "src/rls_descriptors.bin is not envoy-types' (rewrite it: TOLLGATE_BLESS=1 cargo test -p tollgate-rls --test reflection)"
    );
    assert!(
        tollgate_rls::RLS_DESCRIPTORS == want.as_slice(),
        "same files, other bytes: rewrite it (TOLLGATE_BLESS=1)"
    );
}
