//! Graceful shutdown: SIGTERM (what the kubelet sends) or SIGINT (Ctrl-C) into one signal every
//! part of the process waits on.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Completes once the process is asked to stop. Clones share it; each server, controller and
/// background task of a component waits on its own clone ([`Shutdown::signaled`]).
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// Fires a [`Shutdown`] made with [`Shutdown::manual`]; dropping it fires it too, so nothing waits
/// forever on a trigger that is gone.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

impl Trigger {
    /// Asks every clone of the signal to stop.
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Listens for SIGTERM and SIGINT from now on (the handlers are installed before this
    /// returns, so a signal that arrives at once is not lost). Call it inside a tokio runtime.
    pub fn on_signals() -> Self {
        let (trigger, shutdown) = Self::manual();
        let terminate = listen(SignalKind::terminate(), "SIGTERM");
        let interrupt = listen(SignalKind::interrupt(), "SIGINT");
        tracing::debug!("listening for SIGTERM and SIGINT");
        tokio::spawn(async move {
            tokio::select! {
                () = terminate => {}
                () = interrupt => {}
            }
            tracing::info!("shutting down");
            trigger.fire();
        });
        shutdown
    }

    /// A signal fired by hand (tests; a component stopping another).
    pub fn manual() -> (Trigger, Self) {
        let (sender, receiver) = watch::channel(false);
        (Trigger(sender), Self(receiver))
    }

    /// Completes once shut down; owns its clone, so it can be handed to a server or a task.
    pub fn signaled(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut receiver = self.0.clone();
        async move {
            // An error means the trigger is gone: that stops too.
            let _ = receiver.wait_for(|stop| *stop).await;
        }
    }
}

/// Completes when `kind` arrives; never, with a warning, if it cannot be listened for.
fn listen(kind: SignalKind, name: &'static str) -> impl Future<Output = ()> + Send + 'static {
    let stream = signal(kind);
    async move {
        match stream {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(error) => {
                tracing::warn!("cannot listen for {name} ({error}); only the other signal stops the process");
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_completes_once_fired_or_once_the_trigger_is_gone() {
        let (trigger, shutdown) = Shutdown::manual();
        let waiting = tokio::spawn(shutdown.clone().signaled());
        assert!(!waiting.is_finished());
        trigger.fire();
        assert!(waiting.await.is_ok());
        shutdown.signaled().await;

        let (trigger, shutdown) = Shutdown::manual();
        drop(trigger);
        shutdown.signaled().await;
    }
}
