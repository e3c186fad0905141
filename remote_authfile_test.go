package main

// Tests of auth.json on disk: the samples Codex writes, its time format, the lock, and the
// account id it may hold.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCodexAuthSamples(t *testing.T) {
	for _, tc := range []struct {
		file, account string
		fedramp, fail bool
	}{
		{file: "chatgpt.json", account: "acct-fixture-1"},
		{file: "chatgpt_legacy.json", account: "acct-fixture-1"},
		{file: "chatgpt_fedramp.json", account: "acct-fixture-1", fedramp: true},
		{file: "agent_identity.json", fail: true},
	} {
		home := t.TempDir()
		data, err := os.ReadFile(filepath.Join("testdata", "codexauth", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(home, codexAuthFile), data, 0o600)
		l, err := loadCodexLogin(home, nil, func() time.Time { return time.Unix(1_800_000_000, 0) })
		if tc.fail {
			if err == nil || !strings.Contains(err.Error(), "--use-agent-identity-auth") {
				t.Errorf("%s: %v, want a pointer to --use-agent-identity-auth", tc.file, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		h, err := l.headers(context.Background())
		if err != nil || h.Get("ChatGPT-Account-ID") != tc.account || (h.Get("X-OpenAI-Fedramp") == "true") != tc.fedramp ||
			!strings.HasPrefix(h.Get("Authorization"), "Bearer eyJ") {
			t.Errorf("%s: headers %v, %v", tc.file, h, err)
		}
	}
}

func TestCodexAuthTimeFormat(t *testing.T) {
	for ns, want := range map[int]string{
		0:         "2031-01-02T03:04:05Z",
		120000000: "2031-01-02T03:04:05.120Z",
		123456000: "2031-01-02T03:04:05.123456Z",
		123456789: "2031-01-02T03:04:05.123456789Z",
	} {
		if got := formatCodexTime(time.Date(2031, 1, 2, 3, 4, 5, ns, time.UTC)); got != want {
			t.Errorf("%d ns: %s, want %s", ns, got, want)
		}
	}
}

func TestCodexAuthLockHonoursContext(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockCodexAuth(context.Background(), filepath.Join(dir, codexAuthLockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := lockCodexAuth(ctx, filepath.Join(dir, codexAuthLockFile)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second lock while held: %v", err)
	}
}

// TestCodexAuthBadAccountID: an account id that cannot travel in a header is refused when
// auth.json is read, with an error naming the file and the fix, not at every request.
func TestCodexAuthBadAccountID(t *testing.T) {
	access := chatGPTTestToken("acct-1", codexTestNow.Add(time.Hour), nil)
	refresh := "rt-" + strings.Repeat("s", 40)
	for _, acct := range []string{"acct\x01evil", "acct\r\nX-Evil: 1", "acct evil", "acct\x7fevil", "acct-é-evil", strings.Repeat("e", chatGPTAccountIDMaxBytes+1)} {
		home := t.TempDir()
		doc := chatGPTAuthDoc(access, refresh, "acct-1")
		doc["tokens"].(map[string]any)["account_id"] = acct
		writeCodexAuth(t, home, doc)
		_, err := loadCodexLogin(home, nil, codexTestClock)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(home, codexAuthFile)) ||
			!strings.Contains(err.Error(), "account_id") || !strings.Contains(err.Error(), "run `codex login` again") {
			t.Errorf("account_id %q: %v; want an error naming auth.json, account_id and `codex login`", acct, err)
			continue
		}
		if strings.Contains(err.Error(), "evil") || strings.Contains(err.Error(), "eeeeeeee") {
			t.Errorf("account_id %q: the error quotes it: %v", acct, err)
		}
		assertNoSecrets(t, err, access, refresh)
	}

	// Written there later, by another process: the refresh that reads it fails for good.
	newTokenEndpoint(t)
	home := t.TempDir()
	expired := chatGPTTestToken("acct-1", codexTestNow.Add(-time.Hour), nil)
	writeCodexAuth(t, home, chatGPTAuthDoc(expired, refresh, "acct-1"))
	l, err := loadCodexLogin(home, nil, codexTestClock)
	if err != nil {
		t.Fatal(err)
	}
	doc := chatGPTAuthDoc(expired, refresh, "acct-1")
	doc["tokens"].(map[string]any)["account_id"] = "acct-1\x00"
	writeCodexAuth(t, home, doc)
	_, err = l.headers(context.Background())
	if err == nil || !authErrorPermanent(err) || !strings.Contains(err.Error(), "codex login") {
		t.Errorf("bad account_id on reread: %v; want a permanent error saying to run codex login", err)
	}
	assertNoSecrets(t, err, expired, refresh)
}
