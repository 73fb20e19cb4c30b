//! The layer's response body, and the concurrency slot an admitted request holds until its
//! response has ended.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The concurrency slots of one admitted request, given back to the policy's store exactly
/// once: by [`Slot::release`] when the response's body has ended, or else when the slot is
/// dropped with whatever holds it (the response body unread or cut off, the inner
/// service's future cancelled, failed or unwound by a panic).
pub(crate) struct Slot(Option<Box<dyn FnOnce() + Send + Sync>>);

impl Slot {
    /// No slot: a policy without a concurrency limit, or a request not admitted.
    pub(crate) fn none() -> Slot {
        Slot(None)
    }

    /// Slots that `release` gives back (the store's release of the key and cost a request
    /// was admitted with).
    pub(crate) fn held(release: impl FnOnce() + Send + Sync + 'static) -> Slot {
        Slot(Some(Box::new(release)))
    }

    /// Gives the slots back now (once; later calls and the drop do nothing).
    pub(crate) fn release(&mut self) {
        if let Some(release) = self.0.take() {
            release();
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.release();
    }
}

pin_project_lite::pin_project! {
    /// The body of the layer's responses: the inner service's, or one the layer wrote (a
    /// 429, a 400, a 503). When the request was admitted by a policy with a concurrency
    /// limit, the body holds its slots until it has produced its last frame (before the
    /// server writes that frame out, so a client that has read the whole response finds
    /// the slots free), or until it is dropped (the client went away, the server gave up).
    pub struct ResponseBody<B> {
        // Declared before the body, so dropped first: the slots are free before anything
        // the body owns (a channel to the handler, a file) is dropped.
        slot: Slot,
        #[pin]
        body: Either<B, Full<Bytes>>,
    }
}

impl<B> ResponseBody<B> {
    /// The inner service's body, holding `slot`.
    pub(crate) fn inner(body: B, slot: Slot) -> Self {
        ResponseBody {
            slot,
            body: Either::Left(body),
        }
    }

    /// A body the layer wrote.
    pub(crate) fn own(bytes: Bytes) -> Self {
        ResponseBody {
            slot: Slot::none(),
            body: Either::Right(Full::new(bytes)),
        }
    }
}

impl<B> Body for ResponseBody<B>
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
        let last = match &frame {
            // The end, or an error (the server stops sending).
            None | Some(Err(_)) => true,
            // Trailers come last; data is last when the body says so.
            Some(Ok(f)) => f.is_trailers() || this.body.is_end_stream(),
        };
        if last {
            this.slot.release();
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
