//! The response future of [`crate::RateLimit`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use crate::body::{ResponseBody, Slot};
use crate::fields::{add_fields, Fields};
use crate::grpc;

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pin_project! {
    /// The response future of [`crate::RateLimit`]: the inner service's response with the
    /// rate limit's fields added, the layer's own answer (a 429, a 400, a 503), or, for a
    /// store that waits (Redis), the decision and then either. Not boxed when the store
    /// decides at once (a box is an allocation and a copy of the inner service's future
    /// per request; see the crate's README).
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        Forward { #[pin] future: F, fields: Fields, slot: Slot },
        Answered { response: Option<Response<ResponseBody<B>>> },
        Waiting { future: BoxFuture<Result<Response<ResponseBody<B>>, E>> },
    }
}

/// The layer's own response, as a gRPC client expects it for a gRPC call.
pub(crate) fn own_answer<B>(
    response: Response<ResponseBody<B>>,
    grpc: bool,
) -> Response<ResponseBody<B>> {
    if grpc {
        grpc::answer(response)
    } else {
        response
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    /// A future of the layer's own response ([`own_answer`]).
    pub(crate) fn answered(response: Response<ResponseBody<B>>, grpc: bool) -> Self {
        ResponseFuture {
            kind: Kind::Answered {
                response: Some(own_answer(response, grpc)),
            },
        }
    }

    /// The inner service's response, with the rate limit's header fields added; its body
    /// holds the request's concurrency slots (an error from the inner service drops them
    /// with this future).
    pub(crate) fn forward(future: F, fields: Fields, slot: Slot) -> Self {
        ResponseFuture {
            kind: Kind::Forward {
                future,
                fields,
                slot,
            },
        }
    }

    /// A decision still to be made (by a store that waits), then either answer.
    pub(crate) fn waiting(future: BoxFuture<Result<Response<ResponseBody<B>>, E>>) -> Self {
        ResponseFuture {
            kind: Kind::Waiting { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Forward {
                future,
                fields,
                slot,
            } => {
                let resp = std::task::ready!(future.poll(cx))?;
                let slot = std::mem::replace(slot, Slot::none());
                let mut resp = resp.map(|body| ResponseBody::inner(body, slot));
                add_fields(&mut resp, std::mem::take(fields));
                Poll::Ready(Ok(resp))
            }
            KindProj::Answered { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after it completed"))),
            KindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}
