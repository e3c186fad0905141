package main

// `exec-server relay`, the registry (docs/remote.md "Self-hosted relay", §2): register,
// validate and connect, and the state of each environment they share with the rendezvous
// (relayd_rendezvous.go).
//
//	POST /cloud/environment/{id}/register  executor: its public key → a registration and its
//	                                       rendezvous URL (a fresh secret in the query)
//	POST /cloud/environment/{id}/connect   harness: its public key → the executor's key, the
//	                                       registration id, an authorization bound to that key,
//	                                       and a rendezvous URL (a ticket in the query)
//	POST /cloud/environment/{id}/validate  executor: is (harness key, authorization) one this
//	                                       relay issued, for the stream the harness opened?
//
// Refusals: 401 for a missing, unknown or expired bearer; 403 for a token without the grant;
// 404 for an environment nobody registered; 400 for a body that is not the protocol's; 429
// "capacity" for a token at its registrations, 503 "capacity" for a relay at its
// environments, 429 "too_many_bundles" for an environment at its connect bundles. The body
// is {"error":{"code":…,"message":…}}, as the registry client reads it (docs/remote.md
// §12.3).

import (
	"net/http"
	"net/url"
	"strings"
	"time"
)

// relaydEnv is one registered environment. Its fields are guarded by relayd.mu.
type relaydEnv struct {
	id     string
	regID  string // executor_registration_id: in every stream's Noise prologue
	secret string // the sig of the executor's rendezvous URL
	key    *noisePublicKey
	owner  string // the name of the token that registered it

	executor   *relaydSocket
	executorUp chan struct{} // closed, and replaced, whenever an executor socket comes up
	// orphaned is when the registration last was without an executor socket (its
	// registration, or its socket's end); zero while one is up. See relaydOrphanTimeout.
	orphaned time.Time

	auths       []*relaydAuth // connect bundles still good, oldest first
	streams     map[string]*relaydStream
	established int                            // streams the executor answered: at most maxStreams
	tokens      map[string]*relaydTokenStreams // token name → its streams here (relayd_rendezvous.go)
}

// relaydAuth is one connect bundle: the authorization the harness puts in Noise message 1,
// the harness key it is bound to, and the ticket of its rendezvous URL.
type relaydAuth struct {
	authorization string
	ticket        string
	key           *noisePublicKey
	token         string // who asked: its socket counts against this token
	expires       time.Time
	sockets       int // harness sockets live with its ticket: at most relaydMaxTicketSockets
}

// relaydBearer authenticates a request and checks one grant of its token; it answers the
// refusal itself and returns nil then.
func (d *relayd) relaydBearer(w http.ResponseWriter, r *http.Request, envID string, register bool) *relaydToken {
	tok, err := d.cfg.Load().authenticate(r.Header, d.now())
	if err != nil {
		// The operator sees refusals of unknown tokens too; the presented token is never logged.
		d.peerLog.Info("relay: unauthorized", "environment_id", envID, "remote", r.RemoteAddr, "reason", err.Error())
		relaydError(w, http.StatusUnauthorized, "unauthorized", err.Error())
		return nil
	}
	grants, verb := tok.connect, "connect to"
	if register {
		grants, verb = tok.register, "register"
	}
	if !tok.may(grants, envID) {
		d.peerLog.Info("relay: refused", "token", tok.name, "environment_id", envID, "action", verb)
		relaydError(w, http.StatusForbidden, "forbidden", "token "+tok.name+" may not "+verb+" environment "+envID)
		return nil
	}
	return tok
}

// wsBase is the websocket base URL of the node placing envID.
func (d *relayd) wsBase(envID string) string {
	base := d.place(envID)
	if rest, ok := strings.CutPrefix(base, "https://"); ok {
		return "wss://" + rest
	}
	return "ws://" + strings.TrimPrefix(base, "http://")
}

func (d *relayd) register(w http.ResponseWriter, r *http.Request, envID string) {
	tok := d.relaydBearer(w, r, envID, true)
	if tok == nil {
		return
	}
	var body struct {
		SecurityProfile   string          `json:"security_profile"`
		ExecutorPublicKey *noisePublicKey `json:"executor_public_key"`
	}
	if err := readRelaydBody(r, &body); err != nil || body.ExecutorPublicKey == nil {
		relaydError(w, http.StatusBadRequest, "invalid_request", "want {security_profile, executor_public_key}")
		return
	}
	if body.SecurityProfile != registrySecurityProfile {
		relaydError(w, http.StatusBadRequest, "unsupported_security_profile", "this relay speaks "+registrySecurityProfile)
		return
	}
	now := d.now()
	env := &relaydEnv{id: envID, regID: randomRelaydID("reg-", 12), secret: randomRelaydID("", 24),
		key: body.ExecutorPublicKey, owner: tok.name, executorUp: make(chan struct{}), streams: map[string]*relaydStream{},
		tokens: map[string]*relaydTokenStreams{}, orphaned: now}
	d.mu.Lock()
	old := d.envs[envID]
	var drop []*relaydSocket
	if status, _ := d.registerRefusalLocked(tok.name, old); status != 0 {
		// Registrations no executor socket came to, or whose socket is long gone, go first
		// (TestAdv24OneTokenFillsTheRegistry).
		drop = d.expireOrphansLocked(now)
		old = d.envs[envID]
	}
	if status, msg := d.registerRefusalLocked(tok.name, old); status != 0 {
		d.mu.Unlock()
		for _, s := range drop {
			s.ws.closeTCP()
		}
		d.peerLog.Info("relay: register refused", "environment_id", clipEnvID(envID), "token", tok.name, "reason", "capacity", "why", msg)
		relaydError(w, status, "capacity", msg)
		return
	}
	d.dropEnvLocked(old)
	d.envs[envID] = env
	d.regs[tok.name]++
	close(d.regUp)
	d.regUp = make(chan struct{})
	drop = append(drop, d.retireLocked(old)...)
	d.mu.Unlock()
	for _, s := range drop {
		s.ws.closeTCP()
	}
	d.log.Info("relay: registered", "environment_id", envID, "token", tok.name, "executor_registration_id", env.regID,
		"replaced", old != nil)
	q := url.Values{"role": {"environment"}, "reg": {env.regID}, "sig": {env.secret}}
	relaydJSON(w, http.StatusOK, map[string]string{
		"environment_id":           envID,
		"url":                      d.wsBase(envID) + relaydRendezvousPath + "environment/" + envID + "?" + q.Encode(),
		"security_profile":         registrySecurityProfile,
		"executor_registration_id": env.regID,
	})
}

// registerRefusalLocked says whether token may hold one more registration, old being the
// current one of the environment it registers (nil: none): 0, or the refusal's status and
// why.
func (d *relayd) registerRefusalLocked(token string, old *relaydEnv) (int, string) {
	switch {
	case (old == nil || old.owner != token) && d.regs[token] >= d.cfg.Load().maxRegistrations:
		return http.StatusTooManyRequests, "token " + token + " holds its maximum of registrations"
	case old == nil && len(d.envs) >= relaydMaxEnvironments:
		return http.StatusServiceUnavailable, "the relay holds its maximum of environments"
	}
	return 0, ""
}

// dropEnvLocked takes a registration out of the map and out of its token's count; the caller
// retires it (retireLocked).
func (d *relayd) dropEnvLocked(env *relaydEnv) {
	if env == nil || d.envs[env.id] != env {
		return
	}
	delete(d.envs, env.id)
	if d.regs[env.owner]--; d.regs[env.owner] <= 0 {
		delete(d.regs, env.owner)
	}
}

// relaydSweepInterval spaces the sweeps of expireOrphansLocked: a token at its cap may ask
// again and again, and each sweep walks every registration.
const relaydSweepInterval = time.Second

// relaydBundlesRetryAfter is the Retry-After of a connect refused too_many_bundles: about
// the time for some of the environment's bundles to expire (relaydAuthorizationTTL).
const relaydBundlesRetryAfter = "60"

// expireOrphansLocked forgets the registrations without an executor socket for
// relaydOrphanTimeout, and returns their sockets for the caller to close.
func (d *relayd) expireOrphansLocked(now time.Time) []*relaydSocket {
	if now.Sub(d.swept) < relaydSweepInterval {
		return nil
	}
	d.swept = now
	var drop []*relaydSocket
	for _, env := range d.envs {
		if env.executor == nil && !env.orphaned.IsZero() && now.Sub(env.orphaned) >= relaydOrphanTimeout {
			d.dropEnvLocked(env)
			drop = append(drop, d.retireLocked(env)...)
		}
	}
	return drop
}

// retireLocked ends a registration that a new one replaces: its streams are gone, and its
// sockets are returned for the caller to close once d.mu is released.
func (d *relayd) retireLocked(old *relaydEnv) []*relaydSocket {
	if old == nil {
		return nil
	}
	var drop []*relaydSocket
	if old.executor != nil {
		drop = append(drop, old.executor)
	}
	for _, st := range old.streams {
		drop = append(drop, st.harness)
		d.releaseLocked(old, st)
	}
	return drop
}

func (d *relayd) connect(w http.ResponseWriter, r *http.Request, envID string) {
	tok := d.relaydBearer(w, r, envID, false)
	if tok == nil {
		return
	}
	var body struct {
		HarnessPublicKey *noisePublicKey `json:"harness_public_key"`
	}
	if err := readRelaydBody(r, &body); err != nil || body.HarnessPublicKey == nil {
		relaydError(w, http.StatusBadRequest, "invalid_request", "want {harness_public_key}")
		return
	}
	now := d.now()
	a := &relaydAuth{authorization: randomRelaydID("hka-", 24), ticket: randomRelaydID("", 24),
		key: body.HarnessPublicKey, token: tok.name, expires: now.Add(relaydAuthorizationTTL)}
	d.mu.Lock()
	env := d.awaitRegistrationLocked(r, envID)
	if env == nil {
		d.mu.Unlock()
		relaydError(w, http.StatusNotFound, "not_registered", "no executor has registered environment "+envID)
		return
	}
	env.pruneAuthsLocked(now)
	if !env.addAuthLocked(a) {
		d.mu.Unlock()
		d.peerLog.Info("relay: connect refused", "environment_id", envID, "token", tok.name, "reason", "too_many_bundles", "why", "bundles at their limit")
		w.Header().Set("Retry-After", relaydBundlesRetryAfter)
		relaydError(w, http.StatusTooManyRequests, "too_many_bundles", "environment "+envID+" holds its maximum of connect bundles: try again later")
		return
	}
	bundle := map[string]any{
		"environment_id":            envID,
		"url":                       d.wsBase(envID) + relaydRendezvousPath + "harness/" + envID + "?" + url.Values{"role": {"harness"}, "ticket": {a.ticket}}.Encode(),
		"security_profile":          registrySecurityProfile,
		"executor_registration_id":  env.regID,
		"executor_public_key":       env.key,
		"harness_key_authorization": a.authorization,
	}
	d.mu.Unlock()
	d.log.Debug("relay: connect bundle issued", "environment_id", envID, "token", tok.name)
	relaydJSON(w, http.StatusOK, bundle)
}

// awaitRegistrationLocked returns envID's registration. While environments are moving
// (relaydMoveWindow after this node started or its fleet's live set changed) it waits up to
// relaydConnectWait for one to appear, with d.mu released meanwhile.
func (d *relayd) awaitRegistrationLocked(r *http.Request, envID string) *relaydEnv {
	env := d.envs[envID]
	if env != nil || !d.now().Before(d.moving) {
		return env
	}
	d.log.Debug("relay: connect waits for a registration", "environment_id", envID)
	t := time.NewTimer(relaydConnectWait)
	defer t.Stop()
	for env == nil {
		up := d.regUp
		d.mu.Unlock()
		select {
		case <-up:
		case <-t.C:
			d.mu.Lock()
			return d.envs[envID]
		case <-r.Context().Done():
			d.mu.Lock()
			return d.envs[envID]
		}
		d.mu.Lock()
		env = d.envs[envID]
	}
	return env
}

// pendingStreamLocked finds, for a validate without a stream id, a stream not answered yet
// whose harness socket came in with the bundle of authorization. Codex 0.171's executor
// sends no X-Codex-Noise-Stream-Id (checked on the running binary; 0.169 sends it), so the
// stream is known only as one of that bundle's harness's: the rest of validate's checks
// (registration, key, expiry) are the same.
func (e *relaydEnv) pendingStreamLocked(authorization string) *relaydStream {
	for _, st := range e.streams {
		if !st.established && st.harness.auth != nil && authorization != "" && st.harness.auth.authorization == authorization {
			return st
		}
	}
	return nil
}

// addAuthLocked keeps a new bundle: a token at relaydMaxTokenAuthorizations loses its own
// oldest (TestAdv24ConnectFloodEvictsAnotherTokensBundle), and an environment at
// relaydMaxAuthorizations takes none (false). A bundle a live harness socket came in with is
// neither counted nor forgotten: the streams that socket opens later are validated with it
// (TestRelaydBundleOfALiveSocketKept), and relaydMaxTicketSockets and the token's socket
// limit bound such bundles.
func (e *relaydEnv) addAuthLocked(a *relaydAuth) bool {
	oldest, mine := -1, 0
	for i, b := range e.auths {
		if b.token == a.token && b.sockets == 0 {
			if oldest < 0 {
				oldest = i
			}
			mine++
		}
	}
	switch {
	case mine >= relaydMaxTokenAuthorizations:
		e.auths = append(e.auths[:oldest], e.auths[oldest+1:]...)
	case len(e.auths) >= relaydMaxAuthorizations:
		return false
	}
	e.auths = append(e.auths, a)
	return true
}

// pruneAuthsLocked forgets the connect bundles past their time.
func (e *relaydEnv) pruneAuthsLocked(now time.Time) {
	i := 0
	for i < len(e.auths) && !now.Before(e.auths[i].expires) {
		i++
	}
	e.auths = e.auths[i:]
}

// authLocked finds a good bundle by authorization or by ticket.
func (e *relaydEnv) authLocked(now time.Time, match func(*relaydAuth) bool) *relaydAuth {
	e.pruneAuthsLocked(now)
	for _, a := range e.auths {
		if match(a) {
			return a
		}
	}
	return nil
}

func (d *relayd) validate(w http.ResponseWriter, r *http.Request, envID string) {
	if d.relaydBearer(w, r, envID, true) == nil {
		return
	}
	var body struct {
		RegistrationID string          `json:"executor_registration_id"`
		HarnessKey     *noisePublicKey `json:"harness_public_key"`
		Authorization  string          `json:"harness_key_authorization"`
	}
	if err := readRelaydBody(r, &body); err != nil || body.HarnessKey == nil {
		relaydError(w, http.StatusBadRequest, "invalid_request", "want {executor_registration_id, harness_public_key, harness_key_authorization}")
		return
	}
	streamID := r.Header.Get(registryStreamIDHeader)
	d.mu.Lock()
	env := d.envs[envID]
	if env == nil {
		d.mu.Unlock()
		relaydError(w, http.StatusNotFound, "not_registered", "no executor has registered environment "+envID)
		return
	}
	why := ""
	st := env.streams[streamID]
	if streamID == "" {
		st = env.pendingStreamLocked(body.Authorization)
	}
	switch {
	case body.RegistrationID != env.regID:
		why = "not the current registration"
	case st == nil:
		why = "no harness opened that stream"
	case st.established:
		why = "the stream is already established"
	case st.harness.auth == nil || st.harness.auth.authorization != body.Authorization:
		why = "not the authorization of the harness that opened the stream"
	case env.authLocked(d.now(), func(a *relaydAuth) bool { return a == st.harness.auth }) == nil:
		why = "the authorization has expired"
	case !st.harness.auth.key.equal(body.HarnessKey):
		why = "the authorization was issued for another harness key"
	}
	d.mu.Unlock()
	if why != "" {
		d.peerLog.Info("relay: validate refused", "environment_id", envID, "stream_id", logStreamID(streamID), "why", why)
	}
	relaydJSON(w, http.StatusOK, map[string]bool{"valid": why == ""})
}
