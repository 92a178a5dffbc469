//! Turns a panic inside a boxed future into a value, so a buggy hook or tool becomes a
//! result instead of taking the batch down.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Creates and polls `F`, catching a panic in either as `Err(message)`. Creating the future
/// is guarded too: a trait method may panic before it returns its boxed future.
pub(crate) enum CatchUnwind<F> {
    Running(F),
    Panicked(Option<String>),
}

impl<F> CatchUnwind<F> {
    pub(crate) fn start(make: impl FnOnce() -> F) -> Self {
        match catch(make) {
            Ok(future) => Self::Running(future),
            Err(panic) => Self::Panicked(Some(panic)),
        }
    }
}

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            // The future is not polled again after a panic (the caller gets Ready(Err)), so a
            // broken invariant inside it cannot be observed: asserting unwind safety is sound.
            Self::Running(inner) => {
                match catch_unwind(AssertUnwindSafe(|| Pin::new(inner).poll(cx))) {
                    Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
                    Ok(Poll::Pending) => Poll::Pending,
                    Err(payload) => Poll::Ready(Err(panic_message(payload.as_ref()))),
                }
            }
            Self::Panicked(panic) => Poll::Ready(Err(panic
                .take()
                .unwrap_or_else(|| "a panic (reported once already)".to_owned()))),
        }
    }
}

/// Runs a closure, catching a panic as `Err(message)`.
pub(crate) fn catch<T>(run: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(run)).map_err(|payload| panic_message(payload.as_ref()))
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-text payload".to_owned()
    }
}
