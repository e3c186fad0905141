package main

// auth.json on disk as Codex keeps it (docs/remote.md §8): its format, read and written back
// member for member, its lock file, and its atomic replacement. The sign-in that uses it, and
// its refresh, are remote_codexauth.go's.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// codexAuthDoc is one reading of auth.json. members keeps every top-level member, so members
// this code does not know survive a rewrite.
type codexAuthDoc struct {
	members     map[string]json.RawMessage
	mode        string
	apiKey      string
	tokens      *codexTokens
	lastRefresh time.Time // zero when absent
}

// codexTokens is the "tokens" member.
type codexTokens struct {
	members      map[string]json.RawMessage
	idToken      string
	accessToken  string
	refreshToken string
	accountID    string // "" when null or absent
	fedramp      bool   // from the id_token claims
}

// The order in which Codex serializes the members it knows; others follow, sorted.
var (
	codexAuthMemberOrder  = []string{"auth_mode", "OPENAI_API_KEY", "tokens", "last_refresh", "agent_identity", "personal_access_token"}
	codexTokenMemberOrder = []string{"id_token", "access_token", "refresh_token", "account_id"}
)

// parseCodexAuth reads auth.json. Errors name the member at fault but never quote its value.
func parseCodexAuth(data []byte) (*codexAuthDoc, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil || members == nil {
		return nil, errors.New("not a JSON object")
	}
	d := &codexAuthDoc{members: members}
	var err error
	if d.mode, err = optionalJSONString(members, "auth_mode"); err != nil {
		return nil, err
	}
	apiKeyRaw := members["OPENAI_API_KEY"]
	if d.apiKey, err = optionalJSONString(members, "OPENAI_API_KEY"); err != nil {
		return nil, err
	}
	if d.mode == "" {
		d.mode = codexAuthModeChatGPT
		if !jwtIsNull(apiKeyRaw) {
			d.mode = codexAuthModeAPIKey
		}
	}
	if raw := members["tokens"]; !jwtIsNull(raw) {
		if d.tokens, err = parseCodexTokens(raw); err != nil {
			return nil, err
		}
	}
	if raw := members["last_refresh"]; !jwtIsNull(raw) {
		s, ok := jwtString(raw)
		t, perr := time.Parse(time.RFC3339Nano, s)
		if !ok || perr != nil {
			return nil, errors.New("last_refresh is not an RFC 3339 time")
		}
		d.lastRefresh = t
	}
	return d, nil
}

func parseCodexTokens(raw json.RawMessage) (*codexTokens, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil || members == nil {
		return nil, errors.New("tokens is not a JSON object")
	}
	t := &codexTokens{members: members}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"id_token", &t.idToken}, {"access_token", &t.accessToken}, {"refresh_token", &t.refreshToken}} {
		s, ok := jwtString(members[f.name])
		if !ok {
			return nil, fmt.Errorf("tokens.%s is missing or not a string", f.name)
		}
		*f.dst = s
	}
	var err error
	if t.accountID, err = optionalJSONString(members, "account_id"); err != nil {
		return nil, fmt.Errorf("tokens.%w", err)
	}
	// It becomes the ChatGPT-Account-ID header, which net/http would refuse to send on every
	// request; the value is not quoted, since the file is the user's and may hold anything.
	if t.accountID != "" && !validChatGPTAccountID(t.accountID) {
		return nil, errors.New("tokens.account_id is not a valid ChatGPT account ID")
	}
	// Codex refuses to load an auth.json whose id_token is not a JWT.
	claims, err := chatGPTClaimsOf(t.idToken)
	if err != nil {
		return nil, fmt.Errorf("tokens.id_token: %w", err)
	}
	t.fedramp = claims.fedramp
	return t, nil
}

// optionalJSONString reads a member that may be absent, null or a string.
func optionalJSONString(members map[string]json.RawMessage, name string) (string, error) {
	raw := members[name]
	if jwtIsNull(raw) {
		return "", nil
	}
	s, ok := jwtString(raw)
	if !ok {
		return "", fmt.Errorf("%s is not a string", name)
	}
	return s, nil
}

// marshal renders the document as Codex does: members in its order, two-space indentation.
func (d *codexAuthDoc) marshal() ([]byte, error) {
	if d.tokens != nil {
		tokens, err := orderedJSONObject(d.tokens.members, codexTokenMemberOrder)
		if err != nil {
			return nil, err
		}
		d.members["tokens"] = tokens
	}
	compact, err := orderedJSONObject(d.members, codexAuthMemberOrder)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, compact, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// orderedJSONObject writes members as one JSON object: the names in order first, then the rest
// sorted, so the output does not depend on map iteration.
func orderedJSONObject(members map[string]json.RawMessage, order []string) (json.RawMessage, error) {
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	rank := func(name string) int {
		for i, o := range order {
			if o == name {
				return i
			}
		}
		return len(order)
	}
	sort.Slice(names, func(i, j int) bool {
		ri, rj := rank(names[i]), rank(names[j])
		if ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	var b bytes.Buffer
	b.WriteByte('{')
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		key, err := json.Marshal(name)
		if err != nil {
			return nil, err
		}
		b.Write(key)
		b.WriteByte(':')
		b.Write(members[name])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// setString sets a member to a JSON string.
func setJSONString(members map[string]json.RawMessage, name, value string) {
	raw, _ := json.Marshal(value) // a Go string always marshals
	members[name] = raw
}

// formatCodexTime renders a time as Codex's chrono does for last_refresh: UTC, "Z", and 0, 3, 6
// or 9 fractional digits, the fewest that keep the value.
func formatCodexTime(t time.Time) string {
	t = t.UTC()
	ns := t.Nanosecond()
	layout := "2006-01-02T15:04:05.000000000Z"
	switch {
	case ns == 0:
		layout = "2006-01-02T15:04:05Z"
	case ns%1e6 == 0:
		layout = "2006-01-02T15:04:05.000Z"
	case ns%1e3 == 0:
		layout = "2006-01-02T15:04:05.000000Z"
	}
	return t.Format(layout)
}

// clone returns a copy that can be changed without changing d.
func (d *codexAuthDoc) clone() *codexAuthDoc {
	c := *d
	c.members = maps.Clone(d.members)
	if d.tokens != nil {
		t := *d.tokens
		t.members = maps.Clone(d.tokens.members)
		c.tokens = &t
	}
	return &c
}

// sameCredential reports whether two readings hold the same tokens.
func (t *codexTokens) sameCredential(o *codexTokens) bool {
	return t.accessToken == o.accessToken && t.refreshToken == o.refreshToken && t.idToken == o.idToken
}

// lockCodexAuth takes an exclusive flock on path, creating it, and returns its release. It
// polls so that ctx can end the wait.
func lockCodexAuth(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the Codex sign-in lock: %w", err)
	}
	fd := int(f.Fd())
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() {
				unix.Flock(fd, unix.LOCK_UN)
				f.Close()
			}, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		t := time.NewTimer(codexLockPollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("waiting for the Codex sign-in lock: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// writeFileAtomic replaces path with data through replaceAtomically (fs.go): a temporary file in
// the same directory, synced here, then renamed over the old one. A symlinked path is followed
// so the link survives; a file with other hard links is refused, since the rename would split
// them.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	old, err := os.Stat(target)
	if err != nil {
		return err
	}
	if st, ok := old.Sys().(*syscall.Stat_t); ok && uint64(st.Nlink) > 1 {
		return fmt.Errorf("%s has other hard links; not replacing it", target)
	}
	err = replaceAtomically(target, old, &perm, func(f *os.File) error {
		if _, err := f.Write(data); err != nil {
			return err
		}
		return f.Sync()
	})
	if err != nil {
		return fmt.Errorf("replacing %s: %w", target, err)
	}
	if d, err := os.Open(filepath.Dir(target)); err == nil { // make the rename durable; best effort
		d.Sync()
		d.Close()
	}
	return nil
}
