//! The adaptive layer's response body: the inner service's, holding the request's permit
//! until its last frame, so that the latency measured runs from the call to the end of
//! the response body; or the layer's own 503.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use tollgate::adaptive::Outcome;

use crate::adaptive::limit::Permit;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project_lite::pin_project! {
    /// The body of [`crate::Adaptive`]'s responses. An admitted request's body reports
    /// the request to its route's controller when it has produced its last frame (with the
    /// outcome its status gave), when it fails (a timeout: the real latency is unknown), or
    /// when it is dropped unfinished (the client went away: a timeout too).
    pub struct AdaptiveBody<B> {
        permit: Option<(Permit, Outcome)>,
        #[pin]
        body: Either<B, Full<Bytes>>,
    }
}

impl<B> AdaptiveBody<B> {
    /// The inner service's body; `permit`, if any, is finished with `outcome` at its end.
    pub(crate) fn inner(body: B, permit: Option<(Permit, Outcome)>) -> Self {
        AdaptiveBody {
            permit,
            body: Either::Left(body),
        }
    }

    /// A body the layer wrote.
    pub(crate) fn own(bytes: Bytes) -> Self {
        AdaptiveBody {
            permit: None,
            body: Either::Right(Full::new(bytes)),
        }
    }
}

impl<B> Body for AdaptiveBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let frame = ready!(this.body.as_mut().poll_frame(cx));
        let end = match &frame {
            None => true,
            Some(Ok(f)) => f.is_trailers() || this.body.is_end_stream(),
            Some(Err(_)) => {
                if let Some((mut permit, _)) = this.permit.take() {
                    permit.finish(Outcome::Timeout);
                }
                false
            }
        };
        if end {
            if let Some((mut permit, outcome)) = this.permit.take() {
                permit.finish(outcome);
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
