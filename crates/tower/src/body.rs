//! The layer's response body, and the concurrency slot an admitted request holds until its
//! response has ended.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How a response ended, as told to what its body holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The body produced its last frame.
    Finished,
    /// The body failed, or was dropped unfinished (the client went away, the server gave
    /// up, the inner service's future was cancelled or unwound by a panic).
    Cut,
}

/// What one admitted request holds until its response has ended (its concurrency slots, a
/// reservation to settle, an adaptive limit's permit), finished exactly once: by
/// [`Slot::release`] when the response's body has ended, or else when the slot is dropped
/// with whatever holds it.
pub(crate) struct Slot(Option<Box<dyn FnOnce(End) + Send + Sync>>);

impl Slot {
    /// No slot: a policy without a concurrency limit, or a request not admitted.
    pub(crate) fn none() -> Slot {
        Slot(None)
    }

    /// A slot that `release` finishes however the response ended (the store's release of
    /// the key and cost a request was admitted with).
    pub(crate) fn held(release: impl FnOnce() + Send + Sync + 'static) -> Slot {
        Slot::until(move |_| release())
    }

    /// A slot that `finish` is told how the response ended.
    pub(crate) fn until(finish: impl FnOnce(End) + Send + Sync + 'static) -> Slot {
        Slot(Some(Box::new(finish)))
    }

    /// Finishes the slot now, the response having ended `how` (once; later calls and the
    /// drop do nothing).
    pub(crate) fn end(&mut self, how: End) {
        if let Some(finish) = self.0.take() {
            finish(how);
        }
    }

    /// Finishes the slot now, the response having produced its last frame.
    pub(crate) fn release(&mut self) {
        self.end(End::Finished);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.end(End::Cut);
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
        let end = match &frame {
            None => Some(End::Finished),
            // Trailers come last; data is last when the body says so.
            Some(Ok(f)) => (f.is_trailers() || this.body.is_end_stream()).then_some(End::Finished),
            // The server stops sending.
            Some(Err(_)) => Some(End::Cut),
        };
        if let Some(how) = end {
            this.slot.end(how);
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
