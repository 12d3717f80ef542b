//! Fairness between connections: a connection that sends requests back to back gives the
//! runtime's other tasks a turn between them.
//!
//! hyper serves up to 16 pipelined HTTP/1.1 requests of one connection per poll of that
//! connection's task. A client pipelining thousands of cheap requests (a flood of made-up
//! methods) then holds a worker for 16 requests at a time, and a normal client's request
//! waits behind every such connection at each of its hops (its server read, its response).
//! When a worker thread serves two requests of the same task in a row, the second first yields:
//! the busy connection goes to the back of the run queue. A connection whose requests come one at
//! a time, with other work in between, never waits.

use std::cell::Cell;

use axum::extract::Request;
use axum::response::Response;
use tokio::task::Id;

thread_local! {
    /// The task that started the last request served on this worker thread.
    static LAST_TASK: Cell<Option<Id>> = const { Cell::new(None) };
}

/// Yields to the runtime once when this task also started the previous request on this
/// thread, then serves the request.
pub(crate) async fn yield_when_back_to_back(request: Request, next: impl AsyncFnOnce(Request) -> Response) -> Response {
    if let Some(task) = tokio::task::try_id()
        && LAST_TASK.with(|last| last.replace(Some(task))) == Some(task)
    {
        tokio::task::yield_now().await;
        // Whoever ran meanwhile served no request: the next one of this task may come at once.
        LAST_TASK.with(|last| last.set(None));
    }
    next(request).await
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::Poll;

    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    /// How many times serving one request was Pending (no real wait in this handler: only the
    /// fairness yield).
    async fn pendings(app: Router) -> usize {
        let request = Request::get("/").body(Body::empty()).unwrap();
        let mut future = std::pin::pin!(app.oneshot(request));
        let mut pending = 0;
        std::future::poll_fn(|cx| match future.as_mut().poll(cx) {
            Poll::Pending => {
                pending += 1;
                Poll::Pending
            }
            Poll::Ready(response) => Poll::Ready(response),
        })
        .await
        .unwrap();
        pending
    }

    #[tokio::test]
    async fn a_task_serving_requests_back_to_back_yields_between_them() {
        let middleware = |request, next: axum::middleware::Next| {
            yield_when_back_to_back(request, async move |request| next.run(request).await)
        };
        let app = Router::new().route("/", get(|| async { "ok" })).layer(axum::middleware::from_fn(middleware));
        let one_task = tokio::spawn(async move {
            let first = pendings(app.clone()).await;
            let second = pendings(app.clone()).await;
            let third = pendings(app).await;
            (first, second, third)
        });
        // The second yields; after that turn the third goes at once.
        assert_eq!(one_task.await.unwrap(), (0, 1, 0));
    }
}
