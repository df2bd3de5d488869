//! Who receives each message: the engine's current recipients, addressed by
//! the message they take, so a stage hands on its outputs without knowing
//! which actor (or which instance of it) is on the other end.
//!
//! Every contract message has exactly one kind of receiver, so one
//! [`Recipient`] per message type is the whole directory. The router fills
//! it at launch and rewrites a stage's entries when the watchdog replaces
//! that stage.

use std::sync::{Arc, RwLock};

use actix::dev::SendError;
use actix::prelude::*;

use crate::contract::*;

/// The current recipient of every message that crosses an actor boundary.
pub struct Wiring {
    /// Router → talker: a new request.
    pub start: Recipient<Work<Box<StartRequest>>>,
    /// Talker → predictor.
    pub token: Recipient<Work<TalkerToken>>,
    /// Predictor → talker.
    pub feedback: Recipient<Work<FrameFeedback>>,
    /// Predictor → code2wav.
    pub frame: Recipient<Work<FrameForDecode>>,
    /// Code2wav → router.
    pub audio: Recipient<AudioOut>,
    /// Any stage → router: a caught panic.
    pub failed: Recipient<StageFailed>,
    /// Router → each stage (by [`StageKind::index`]): forget a request.
    pub drop: [Recipient<DropRequest>; 3],
}

/// The shared, replaceable [`Wiring`] (`None` only while the engine starts).
pub type Directory = Arc<RwLock<Option<Wiring>>>;

pub(crate) fn with_wiring<R>(dir: &Directory, f: impl FnOnce(&Wiring) -> R) -> R {
    let g = dir.read().unwrap_or_else(|e| e.into_inner());
    f(g.as_ref()
        .expect("directory is set before any work is sent"))
}

/// A message a stage hands on, named by what it carries (each has one
/// kind of receiver).
pub enum Handoff {
    /// To the predictor.
    Token(TalkerToken),
    /// Back to the talker.
    Feedback(FrameFeedback),
    /// To code2wav.
    Frame(FrameForDecode),
    /// To the router.
    Audio(AudioOut),
}

impl Handoff {
    /// The stage that receives it (`None`: the router).
    pub(crate) fn stage(&self) -> Option<StageKind> {
        match self {
            Handoff::Token(_) => Some(StageKind::CodePredictor),
            Handoff::Feedback(_) => Some(StageKind::Talker),
            Handoff::Frame(_) => Some(StageKind::Code2Wav),
            Handoff::Audio(_) => None,
        }
    }
}

/// What became of a message handed to [`try_deliver`] or [`deliver`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// In the receiver's mailbox.
    Sent,
    /// The receiver's mailbox is closed (a stage being replaced): dropped,
    /// and its request fails.
    Dropped,
}

/// `try_send` of one message, handing it back (wrapped by `back`) when the
/// mailbox is full; a closed mailbox (a stage being replaced) drops it.
///
/// The recipient is the directory's own instance, not a clone: actix parks
/// a sender that filled a mailbox and refuses its next `try_send` until the
/// receiver has made room, and that state lives in the sender instance.
// The large `Err` is the message handed back unchanged; boxing it would
// allocate on every hand-off to spare a rare full-mailbox path.
#[allow(clippy::result_large_err)]
fn try_send_to<M>(
    r: &Recipient<M>,
    m: M,
    back: impl FnOnce(M) -> Handoff,
) -> Result<Delivery, Handoff>
where
    M: Message + Send + 'static,
    M::Result: Send,
{
    match r.try_send(m) {
        Ok(()) => Ok(Delivery::Sent),
        Err(SendError::Closed(_)) => Ok(Delivery::Dropped),
        Err(SendError::Full(m)) => Err(back(m)),
    }
}

/// `Err` gives the output back when the receiver's mailbox is full. A closed
/// mailbox (a stage being replaced) drops the message: its requests fail.
#[allow(clippy::result_large_err)]
pub(crate) fn try_deliver(dir: &Directory, o: Handoff) -> Result<Delivery, Handoff> {
    with_wiring(dir, |w| match o {
        Handoff::Token(m) => try_send_to(&w.token, Work(m), |Work(m)| Handoff::Token(m)),
        Handoff::Feedback(m) => try_send_to(&w.feedback, Work(m), |Work(m)| Handoff::Feedback(m)),
        Handoff::Frame(m) => try_send_to(&w.frame, Work(m), |Work(m)| Handoff::Frame(m)),
        Handoff::Audio(m) => try_send_to(&w.audio, m, Handoff::Audio),
    })
}

/// Waits for room (bounded `send`), then delivers.
pub(crate) async fn deliver(dir: &Directory, o: Handoff) -> Delivery {
    // Clone the recipient out of the lock before awaiting.
    let sent = match o {
        Handoff::Token(m) => {
            let r = with_wiring(dir, |w| w.token.clone());
            r.send(Work(m)).await.is_ok()
        }
        Handoff::Feedback(m) => {
            let r = with_wiring(dir, |w| w.feedback.clone());
            r.send(Work(m)).await.is_ok()
        }
        Handoff::Frame(m) => {
            let r = with_wiring(dir, |w| w.frame.clone());
            r.send(Work(m)).await.is_ok()
        }
        Handoff::Audio(m) => {
            let r = with_wiring(dir, |w| w.audio.clone());
            r.send(m).await.is_ok()
        }
    };
    if sent {
        Delivery::Sent
    } else {
        Delivery::Dropped
    }
}

#[cfg(test)]
mod tests {
    //! Hand-off through the directory against a mailbox that is never
    //! drained (no model, no running stage).

    use std::time::Instant;

    use super::*;

    /// Takes every message the directory carries and does nothing.
    struct Sink;

    impl Actor for Sink {
        type Context = Context<Self>;
    }

    impl<T: Send + 'static> Handler<Work<T>> for Sink {
        type Result = ();
        fn handle(&mut self, _: Work<T>, _: &mut Context<Self>) {}
    }

    impl Handler<AudioOut> for Sink {
        type Result = ();
        fn handle(&mut self, _: AudioOut, _: &mut Context<Self>) {}
    }

    impl Handler<StageFailed> for Sink {
        type Result = ();
        fn handle(&mut self, _: StageFailed, _: &mut Context<Self>) {}
    }

    impl Handler<DropRequest> for Sink {
        type Result = bool;
        fn handle(&mut self, _: DropRequest, _: &mut Context<Self>) -> bool {
            false
        }
    }

    fn directory(a: &Addr<Sink>) -> Directory {
        Arc::new(RwLock::new(Some(Wiring {
            start: a.clone().recipient(),
            token: a.clone().recipient(),
            feedback: a.clone().recipient(),
            frame: a.clone().recipient(),
            audio: a.clone().recipient(),
            failed: a.clone().recipient(),
            drop: [
                a.clone().recipient(),
                a.clone().recipient(),
                a.clone().recipient(),
            ],
        })))
    }

    fn feedback(frame_index: u64) -> Handoff {
        Handoff::Feedback(FrameFeedback {
            stamp: Stamp {
                key: RequestKey {
                    session: 1,
                    epoch: 1,
                },
                generation: 0,
                sent_at: Instant::now(),
            },
            frame_index,
            codes: vec![7; 4],
            times: StageTimes::default(),
        })
    }

    #[test]
    fn try_deliver_hands_the_message_back_when_the_mailbox_is_full() {
        actix::System::new().block_on(async {
            // A mailbox of one that nobody drains.
            let mut ctx = Context::<Sink>::new();
            ctx.set_mailbox_capacity(1);
            let dir = directory(&ctx.address());
            assert_eq!(
                try_deliver(&dir, feedback(0)).ok(),
                Some(Delivery::Sent),
                "room for one"
            );
            match try_deliver(&dir, feedback(1)) {
                Err(Handoff::Feedback(f)) => {
                    assert_eq!((f.frame_index, f.codes), (1, vec![7; 4]), "unchanged")
                }
                Err(_) => panic!("handed back as another message"),
                Ok(_) => panic!("a full mailbox took the message"),
            }
            drop(ctx);
        });
    }

    #[test]
    fn try_deliver_drops_the_message_when_the_receiver_is_gone() {
        actix::System::new().block_on(async {
            let ctx = Context::<Sink>::new();
            let dir = directory(&ctx.address());
            // The stage being replaced: its mailbox is closed.
            drop(ctx);
            assert_eq!(try_deliver(&dir, feedback(0)).ok(), Some(Delivery::Dropped));
        });
    }
}
