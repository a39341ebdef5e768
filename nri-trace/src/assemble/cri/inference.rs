//! The CRI assembler's inference: what settled calls say about sandboxes
//! and containers, the runtime's reports of them, and the method of a call
//! whose `:path` was never seen, recovered from all of it (held until the
//! evidence settles it, or released unknown).

use super::{
    cap_insert, message, BTreeSet, ContainerState, CriCall, CriCallAssembler, CriMethod,
    CriObservation, CriOutcome, Effect, HashMap, Held, Identified, Kind, ObjFacts, ObjState,
    RequestInfo, ResponseInfo, SandboxState, Slot, GRPC_NOT_FOUND, HOLD_NS, MAX_HELD, MAX_IDS,
    MAX_SLOT_SETS,
};

impl CriCallAssembler {
    /// Record what a settled call says about objects, and re-examine held
    /// calls against it.
    pub(super) fn learn(
        &mut self,
        m: CriMethod,
        call: &CriCall,
        req: &RequestInfo,
        resp: Option<&ResponseInfo>,
    ) {
        let ok = call.outcome.is_ok();
        let mut observed: Vec<(Kind, String, ObjState)> = Vec::new();
        match (m, resp) {
            (CriMethod::RunPodSandbox, Some(r)) => {
                if let Some(id) = &r.sandbox_id {
                    cap_insert(&mut self.sandboxes, id, &mut self.next_seq)
                        .pod
                        .clone_from(&req.pod);
                    observed.push((
                        Kind::Sandbox,
                        id.clone(),
                        ObjState::Sandbox(SandboxState::Ready),
                    ));
                }
            }
            (CriMethod::CreateContainer, Some(r)) => {
                if let Some(id) = &r.container_id {
                    let f = cap_insert(&mut self.containers, id, &mut self.next_seq);
                    f.container.clone_from(&req.container);
                    f.sandbox_id.clone_from(&req.sandbox_id);
                    observed.push((
                        Kind::Container,
                        id.clone(),
                        ObjState::Container(ContainerState::Created),
                    ));
                }
            }
            _ => {}
        }
        if let Some(r) = resp {
            for s in &r.sandboxes {
                let f = cap_insert(&mut self.sandboxes, &s.id, &mut self.next_seq);
                if f.pod.is_none() {
                    f.pod.clone_from(&s.pod);
                }
                if let Some(state) = s.state {
                    observed.push((Kind::Sandbox, s.id.clone(), ObjState::Sandbox(state)));
                }
            }
            for c in &r.containers {
                let f = cap_insert(&mut self.containers, &c.id, &mut self.next_seq);
                if f.container.is_none() {
                    f.container.clone_from(&c.container);
                }
                if f.sandbox_id.is_none() {
                    f.sandbox_id.clone_from(&c.sandbox_id);
                }
                if let Some(state) = c.state {
                    observed.push((Kind::Container, c.id.clone(), ObjState::Container(state)));
                }
            }
            // An unfiltered list leaves out only what is gone: of the objects
            // last known to exist, those it does not list.
            if r.is_list && !req.filtered {
                let (kind, listed): (Kind, BTreeSet<&str>) = if m == CriMethod::ListPodSandbox {
                    (
                        Kind::Sandbox,
                        r.sandboxes.iter().map(|s| s.id.as_str()).collect(),
                    )
                } else {
                    (
                        Kind::Container,
                        r.containers.iter().map(|c| c.id.as_str()).collect(),
                    )
                };
                let map = match kind {
                    Kind::Sandbox => &self.sandboxes,
                    Kind::Container => &self.containers,
                };
                let live = &mut self.live[kind as usize];
                // Ids evicted from the facts go from the live set too.
                live.retain(|id| map.contains_key(id));

                observed.extend(
                    live.iter()
                        .filter(|id| !listed.contains(id.as_str()))
                        .cloned()
                        .map(|id| (kind, id, ObjState::Gone)),
                );
            }
        }
        // A status call for an object the runtime no longer has.
        if let CriOutcome::Error {
            code: GRPC_NOT_FOUND,
            ..
        } = call.outcome
        {
            match m {
                CriMethod::PodSandboxStatus => {
                    if let Some(id) = &req.sandbox_id {
                        observed.push((Kind::Sandbox, id.clone(), ObjState::Gone));
                    }
                }
                CriMethod::ContainerStatus => {
                    if let Some(id) = &req.container_id {
                        observed.push((Kind::Container, id.clone(), ObjState::Gone));
                    }
                }
                _ => {}
            }
        }
        // The call's own effect.
        let target = req
            .sandbox_id
            .as_ref()
            .map(|id| (Kind::Sandbox, id))
            .or_else(|| req.container_id.as_ref().map(|id| (Kind::Container, id)));
        if !m.is_read_only() {
            if let Some((kind, id)) = target {
                self.bump(kind, id);
            }
        }
        if ok {
            if let (Some(effect), Some((_, id))) = (m.effect(), target) {
                let (kind, state) = match effect {
                    Effect::SandboxStopped => {
                        (Kind::Sandbox, ObjState::Sandbox(SandboxState::NotReady))
                    }
                    Effect::SandboxRemoved => (Kind::Sandbox, ObjState::Gone),
                    Effect::ContainerStarted => (
                        Kind::Container,
                        ObjState::Container(ContainerState::Running),
                    ),
                    Effect::ContainerStopped => {
                        (Kind::Container, ObjState::Container(ContainerState::Exited))
                    }
                    Effect::ContainerRemoved => (Kind::Container, ObjState::Gone),
                };
                self.set_state(kind, id, state);
            }
        }
        let since = call.start.map_or(0, |t| t.mono_ns);
        for (kind, id, state) in observed {
            self.observe(kind, &id, state, since);
            self.set_state(kind, &id, state);
        }
    }

    pub(super) fn map(&mut self, kind: Kind) -> &mut HashMap<String, ObjFacts> {
        match kind {
            Kind::Sandbox => &mut self.sandboxes,
            Kind::Container => &mut self.containers,
        }
    }

    pub(super) fn facts(&mut self, kind: Kind, id: &str) -> &mut ObjFacts {
        let map = match kind {
            Kind::Sandbox => &mut self.sandboxes,
            Kind::Container => &mut self.containers,
        };
        cap_insert(map, id, &mut self.next_seq)
    }

    pub(super) fn bump(&mut self, kind: Kind, id: &str) {
        self.facts(kind, id).mutations += 1;
    }

    pub(super) fn set_state(&mut self, kind: Kind, id: &str, state: ObjState) {
        self.facts(kind, id).state = Some(state);
        let live = &mut self.live[kind as usize];
        if state == ObjState::Gone {
            live.remove(id);
        } else if !live.contains(id) {
            live.insert(id.to_owned());
            if live.len() > MAX_IDS {
                let map = match kind {
                    Kind::Sandbox => &self.sandboxes,
                    Kind::Container => &self.containers,
                };
                live.retain(|id| map.contains_key(id));
            }
        }
    }

    pub(super) fn kind_of(&self, id: &str) -> Option<Kind> {
        match (
            self.sandboxes.contains_key(id),
            self.containers.contains_key(id),
        ) {
            (true, false) => Some(Kind::Sandbox),
            (false, true) => Some(Kind::Container),
            _ => None,
        }
    }

    /// The runtime reported `state` for an object, in a call that started at
    /// `since`: a held call that was the last to touch the object before
    /// then may be told apart by the change it made.
    pub(super) fn observe(&mut self, kind: Kind, id: &str, state: ObjState, since: u64) {
        let mutations = self.map(kind).get(id).map_or(0, |f| f.mutations);
        let Some(i) = self.held.iter().position(|h| {
            h.object.as_ref().is_some_and(|(k, oid, _, after)| {
                *k == kind
                    && oid == id
                    && *after == mutations
                    && h.call.end.is_some_and(|e| e.mono_ns <= since)
            })
        }) else {
            return;
        };
        let h = &self.held[i];
        let before = h.object.as_ref().and_then(|o| o.2);
        let (method, change) = match (before, state) {
            (
                Some(ObjState::Sandbox(SandboxState::Ready)),
                ObjState::Sandbox(SandboxState::NotReady),
            ) => (CriMethod::StopPodSandbox, "went from ready to not ready"),
            (Some(ObjState::Sandbox(_)), ObjState::Gone) if kind == Kind::Sandbox => {
                (CriMethod::RemovePodSandbox, "was gone afterwards")
            }
            (
                Some(ObjState::Container(ContainerState::Created)),
                ObjState::Container(ContainerState::Running),
            ) => (CriMethod::StartContainer, "went from created to running"),
            (
                Some(ObjState::Container(ContainerState::Running)),
                ObjState::Container(ContainerState::Exited),
            ) => (CriMethod::StopContainer, "went from running to exited"),
            (Some(ObjState::Container(_)), ObjState::Gone) if kind == Kind::Container => {
                (CriMethod::RemoveContainer, "was gone afterwards")
            }
            _ => return,
        };
        if !h.candidates.contains(&method) || !h.call.outcome.is_ok() {
            return;
        }
        let what = match kind {
            Kind::Sandbox => "sandbox",
            Kind::Container => "container",
        };
        let evidence = format!(
            "messages fit {}; the {what} it names {change}, and no other call changed it in between",
            CriMethod::join(&h.candidates, " or ")
        );
        let h = self.held.remove(i);
        self.resolve_held(h, method, evidence);
    }

    /// Settle a call whose `:path` was not seen.
    pub(super) fn infer(
        &mut self,
        mut call: CriCall,
        key: Option<Vec<Slot>>,
        request: Option<Vec<u8>>,
        response: Option<Vec<u8>>,
        out: &mut Vec<CriObservation>,
    ) {
        // 3. A slot set already resolved.
        let conn = call.conn;
        let slot_key = key.clone().map(|k| (conn, k));
        if let Some((m, why)) = slot_key
            .as_ref()
            .and_then(|k| self.slot_methods.get(k))
            .cloned()
        {
            let fits = request
                .as_deref()
                .is_none_or(|b| m.request_fit(b).is_some())
                && response
                    .as_deref()
                    .is_none_or(|b| m.response_fit(b).is_some());
            if fits {
                call.identified = Identified::Inferred {
                    evidence: format!("its :path is in the same HPACK slot as a call {why}"),
                };
                self.complete(&mut call, m, request.as_deref(), response.as_deref());
                out.push(CriObservation::Call(call));
                self.drain_resolved(out);
                return;
            }
        }
        // 1. Message shapes.
        let mut cands = message::candidates(request.as_deref(), response.as_deref());
        let mut why = vec![match (&request, &response) {
            (Some(_), Some(_)) => "its request and response messages fit only",
            (Some(_), None) => "its request message fits only",
            (None, Some(_)) => "its response message fits only",
            (None, None) => "nothing fits only",
        }
        .to_owned()];
        // 2. The kind of object the request names.
        let mut object = None;
        if let Some(b) = request.as_deref() {
            let named: Vec<(CriMethod, Option<(Kind, String)>)> = cands
                .iter()
                .map(|&m| {
                    let info = message::decode_request(m, b).ok();
                    let target = info.and_then(|i| {
                        i.sandbox_id
                            .map(|id| (Kind::Sandbox, id))
                            .or_else(|| i.container_id.map(|id| (Kind::Container, id)))
                    });
                    (m, target)
                })
                .collect();
            let id = named
                .iter()
                .find_map(|(_, t)| t.as_ref().map(|(_, id)| id.clone()));
            if let Some(kind) = id.as_deref().and_then(|id| self.kind_of(id)) {
                let before = cands.len();
                // A request whose field 1 is a known object's id names that
                // object: methods that name none, or another kind, are out.
                cands = named
                    .iter()
                    .filter(|(_, t)| t.as_ref().is_some_and(|(k, _)| *k == kind))
                    .map(|(m, _)| *m)
                    .collect();
                if cands.len() < before {
                    why.push(match kind {
                        Kind::Sandbox => "its id is a known pod sandbox".to_owned(),
                        Kind::Container => "its id is a known container".to_owned(),
                    });
                }
                let id = id.expect("kind of an id");
                // Every remaining candidate names this object in field 1.
                if cands.iter().all(|m| {
                    named
                        .iter()
                        .any(|(n, t)| n == m && t.as_ref().is_some_and(|(_, i)| *i == id))
                }) {
                    let facts = self.map(kind).get(&id);
                    let state = facts.and_then(|f| f.state);
                    object = Some((kind, id, state));
                }
            }
        }
        // 3. The slot set narrows as its calls are seen.
        if self.slot_candidates.len() >= MAX_SLOT_SETS {
            self.slot_candidates.clear();
        }
        if self.slot_methods.len() >= MAX_SLOT_SETS {
            self.slot_methods.clear();
        }
        if let Some(k) = &slot_key {
            let entry = self
                .slot_candidates
                .entry(k.clone())
                .or_insert_with(|| cands.clone());
            entry.retain(|m| cands.contains(m));
            if entry.len() == 1 && cands.len() > 1 && cands.contains(&entry[0]) {
                cands.clone_from(entry);
                why.push("calls sharing its :path HPACK slot fit only it".to_owned());
            }
        }
        if cands.len() == 1 {
            let m = cands[0];
            let evidence = format!("{} {}", why.join("; "), m.name());
            let evidence = evidence.replacen(" only;", ";", 1);
            call.identified = Identified::Inferred {
                evidence: evidence.clone(),
            };
            if let Some(k) = slot_key {
                self.slot_methods
                    .insert(k, (m, format!("identified as {} ({evidence})", m.name())));
            }
            self.complete(&mut call, m, request.as_deref(), response.as_deref());
            out.push(CriObservation::Call(call));
            self.drain_slot_resolutions(out);
            return;
        }
        // Held until evidence comes.
        if let Some((kind, id, _)) = &object {
            let (kind, id) = (*kind, id.clone());
            let any_mutating = cands.iter().any(|m| !m.is_read_only());
            if any_mutating {
                self.bump(kind, &id);
            }
        }
        let object = object.map(|(kind, id, state)| {
            let after = self.map(kind).get(&id).map_or(0, |f| f.mutations);
            (kind, id, state, after)
        });
        if let Some((kind, id, _, _)) = &object {
            match kind {
                Kind::Sandbox => call.sandbox_id = Some(id.clone()),
                Kind::Container => call.container_id = Some(id.clone()),
            }
            self.fill_identity(&mut call);
        } else if cands.iter().any(|m| m.request_names().is_some()) {
            // An id no earlier call showed (its object predates the
            // attach): kept as is, for the NRI events that name it.
            call.request_id = request.as_deref().and_then(message::request_id);
        }
        if self.held.len() >= MAX_HELD {
            self.stats.held_overflow += 1;
            let h = self.held.remove(0);
            out.push(CriObservation::Call(Self::unresolved(h)));
        }
        self.held.push(Held {
            call,
            candidates: cands,
            key,
            request,
            response,
            object,
        });
    }

    /// Held calls of resolved slot sets.
    pub(super) fn drain_slot_resolutions(&mut self, out: &mut Vec<CriObservation>) {
        let mut i = 0;
        while i < self.held.len() {
            let h = &self.held[i];
            let hit = h
                .key
                .clone()
                .and_then(|k| self.slot_methods.get(&(h.call.conn, k)))
                .filter(|(m, _)| h.candidates.contains(m))
                .cloned();
            match hit {
                Some((m, why)) => {
                    let h = self.held.remove(i);
                    let evidence = format!("its :path is in the same HPACK slot as a call {why}");
                    out.push(CriObservation::Call(self.finish_held(h, m, evidence)));
                }
                None => i += 1,
            }
        }
        self.drain_resolved(out);
    }

    /// Calls resolved by [`Self::observe`] wait in `resolved` until emitted.
    pub(super) fn drain_resolved(&mut self, out: &mut Vec<CriObservation>) {
        out.append(&mut self.resolved);
    }

    /// A held call resolved by what followed it: so is its slot set, and
    /// the held calls sharing it.
    pub(super) fn resolve_held(&mut self, h: Held, m: CriMethod, evidence: String) {
        let key = h.key.clone().map(|k| (h.call.conn, k));
        let call = self.finish_held(h, m, evidence.clone());
        self.resolved.push(CriObservation::Call(call));
        if let Some(k) = key {
            self.slot_methods
                .insert(k, (m, format!("identified as {} ({evidence})", m.name())));
            let mut out = Vec::new();
            self.drain_slot_resolutions(&mut out);
            self.resolved.append(&mut out);
        }
    }

    pub(super) fn finish_held(&mut self, h: Held, m: CriMethod, evidence: String) -> CriCall {
        let mut call = h.call;
        call.identified = Identified::Inferred { evidence };
        let (pod, sandbox_id, container_id) = (
            call.pod.take(),
            call.sandbox_id.take(),
            call.container_id.take(),
        );
        self.complete(&mut call, m, h.request.as_deref(), h.response.as_deref());
        call.pod = call.pod.or(pod);
        call.sandbox_id = call.sandbox_id.or(sandbox_id);
        call.container_id = call.container_id.or(container_id);
        call
    }

    pub(super) fn unresolved(h: Held) -> CriCall {
        let mut call = h.call;
        call.identified = Identified::Unknown {
            candidates: h.candidates,
        };
        call
    }

    /// Release held calls that waited [`HOLD_NS`] (capture time) past their
    /// end, unresolved.
    pub(super) fn release_expired(&mut self, now: u64, out: &mut Vec<CriObservation>) {
        self.drain_resolved(out);
        let mut i = 0;
        while i < self.held.len() {
            let end = self.held[i].call.end.map_or(0, |e| e.mono_ns);
            if end.saturating_add(HOLD_NS) < now {
                let h = self.held.remove(i);
                out.push(CriObservation::Call(Self::unresolved(h)));
            } else {
                i += 1;
            }
        }
    }
}
