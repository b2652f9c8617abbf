//! The poll, alone. The loop waits on it; every other part that has a source (a model call's
//! socket, a run's pipes, a model-list fetch, an MCP HTTP exchange) gets a [`Slot`] for its
//! owner and registers its descriptors through it, never seeing the poll or a token. Which
//! owner a ready token belongs to is known here and nowhere else.

use std::collections::HashMap;
use std::hash::Hash;
use std::io;
use std::rc::Rc;
use std::time::Duration;

pub use mio::Events;
use mio::event::Source;
use mio::{Interest, Poll, Registry, Token};

/// A place in the poll lent to one owner: its sources' readiness comes back as that owner.
#[derive(Clone)]
pub struct Slot {
    registry: Rc<Registry>,
    token: Token,
}

impl Slot {
    /// Watch `source` for `interest`.
    pub fn register(&self, source: &mut impl Source, interest: Interest) -> io::Result<()> {
        self.registry.register(source, self.token, interest)
    }

    /// Watch `source`, already registered, for `interest` instead.
    pub fn reregister(&self, source: &mut impl Source, interest: Interest) -> io::Result<()> {
        self.registry.reregister(source, self.token, interest)
    }

    /// Stop watching `source` (before it closes).
    pub fn deregister(&self, source: &mut impl Source) -> io::Result<()> {
        self.registry.deregister(source)
    }

    /// A slot on a poll of its own (unit tests, and callers outside a gateway).
    pub fn on(poll: &Poll, token: Token) -> io::Result<Slot> {
        Ok(Slot {
            registry: Rc::new(poll.registry().try_clone()?),
            token,
        })
    }

    /// A slot on a poll nobody waits on (unit tests of parts that only hold one).
    #[cfg(test)]
    pub fn detached(token: usize) -> Slot {
        let poll = Poll::new().expect("a poll");
        Slot::on(&poll, Token(token)).expect("a registry")
    }

    /// The token readiness is reported on (for a caller that polls itself).
    pub fn token(&self) -> Token {
        self.token
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slot({})", self.token.0)
    }
}

/// The poll and who owns each dynamic token (`O`: the loop's owners).
pub struct Reactor<O> {
    poll: Poll,
    registry: Rc<Registry>,
    owners: HashMap<Token, O>,
    tokens: HashMap<O, Token>,
    next: usize,
}

impl<O: Clone + Eq + Hash> Reactor<O> {
    /// A poll whose dynamic tokens start at `first_dynamic` (those below are the loop's own).
    pub fn new(first_dynamic: usize) -> io::Result<Reactor<O>> {
        let poll = Poll::new()?;
        let registry = Rc::new(poll.registry().try_clone()?);
        Ok(Reactor {
            poll,
            registry,
            owners: HashMap::new(),
            tokens: HashMap::new(),
            next: first_dynamic,
        })
    }

    /// Wait for readiness, at most `timeout`.
    pub fn poll(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
        self.poll.poll(events, timeout)
    }

    /// Watch one of the loop's own sources under its fixed token.
    pub fn register_fixed(
        &self,
        source: &mut impl Source,
        token: Token,
        interest: Interest,
    ) -> io::Result<()> {
        self.registry.register(source, token, interest)
    }

    /// Stop watching a source (one of the loop's own, or one whose owner is gone).
    pub fn deregister(&self, source: &mut impl Source) {
        let _ = self.registry.deregister(source);
    }

    /// A waker that makes the poll return with `token` (from another thread).
    pub fn waker(&self, token: Token) -> io::Result<mio::Waker> {
        mio::Waker::new(&self.registry, token)
    }

    /// The slot of `owner`: the one it holds, or a new token for it.
    pub fn slot(&mut self, owner: O) -> Slot {
        let token = match self.tokens.get(&owner) {
            Some(&t) => t,
            None => {
                let t = Token(self.next);
                self.next += 1;
                self.owners.insert(t, owner.clone());
                self.tokens.insert(owner, t);
                t
            }
        };
        Slot {
            registry: self.registry.clone(),
            token,
        }
    }

    /// `owner`'s sources are gone: its token routes nothing any more (a late readiness of it
    /// is dropped), and its next slot gets a new one.
    pub fn release(&mut self, owner: &O) {
        if let Some(t) = self.tokens.remove(owner) {
            self.owners.remove(&t);
        }
    }

    /// Who a ready dynamic token belongs to.
    pub fn owner(&self, token: Token) -> Option<&O> {
        self.owners.get(&token)
    }

    /// What must hold for readiness to reach its owner (`Gateway::check`): tokens and owners
    /// map one to one.
    pub fn check(&self) -> Result<(), String> {
        let paired = self.owners.len() == self.tokens.len()
            && self
                .tokens
                .iter()
                .all(|(owner, t)| self.owners.get(t) == Some(owner));
        if paired {
            Ok(())
        } else {
            Err("the poll's tokens and their owners disagree".into())
        }
    }

    /// Owners holding a slot now.
    pub fn slots_held(&self) -> usize {
        self.tokens.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_owner_routes_nothing_and_gets_a_new_token_next_time() {
        let mut r: Reactor<&str> = Reactor::new(10).unwrap();
        let a = r.slot("a");
        assert_eq!(
            r.slot("a").token(),
            a.token(),
            "one slot per owner while held"
        );
        let b = r.slot("b");
        assert_ne!(a.token(), b.token());
        assert_eq!(r.owner(a.token()), Some(&"a"));
        r.release(&"a");
        assert_eq!(r.owner(a.token()), None);
        let again = r.slot("a");
        assert_ne!(
            again.token(),
            a.token(),
            "a stale readiness cannot reach the new one"
        );
        assert_eq!(r.slots_held(), 2);
    }

    #[test]
    fn check_finds_an_owner_its_token_does_not_route_to() {
        let mut r: Reactor<&str> = Reactor::new(10).unwrap();
        r.slot("a");
        r.slot("b");
        r.release(&"a");
        assert_eq!(r.check(), Ok(()));
        // A panic between the two maps' updates.
        r.owners.clear();
        assert!(r.check().is_err());
    }

    #[test]
    fn readiness_of_a_slots_source_comes_back_on_its_owner() {
        let mut r: Reactor<u32> = Reactor::new(10).unwrap();
        let slot = r.slot(7);
        let (mut tx, mut rx) = mio::unix::pipe::new().unwrap();
        slot.register(&mut rx, Interest::READABLE).unwrap();
        std::io::Write::write_all(&mut tx, b"x").unwrap();
        let mut events = Events::with_capacity(4);
        r.poll(&mut events, Some(Duration::from_secs(5))).unwrap();
        let owners: Vec<u32> = events
            .iter()
            .filter_map(|e| r.owner(e.token()))
            .copied()
            .collect();
        assert_eq!(owners, [7]);
        slot.deregister(&mut rx).unwrap();
    }
}
