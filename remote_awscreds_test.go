package main

// Tests of AWS credential and region resolution on real files in a
// temporary home, with the process environment set through t.Setenv.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	awsTestSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSECRETKEY"
	awsTestToken  = "FwoGZXIvYXdzSESSIONTOKEN=="
)

// awsTestHome makes a home with the given ~/.aws files ("" leaves a file
// out) and points HOME at it, clearing every AWS variable the resolver reads.
func awsTestHome(t *testing.T, credentials, config string) string {
	t.Helper()
	home := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "USERPROFILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("HOME", home)
	if err := os.MkdirAll(filepath.Join(home, ".aws"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"credentials": credentials, "config": config} {
		if text == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(home, ".aws", name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

const awsTestCredentials = `# shared credentials
[default]
aws_access_key_id = AKIDDEFAULT
aws_secret_access_key = ` + awsTestSecret + `

  ; an indented comment
[work]
AWS_ACCESS_KEY_ID=AKIDWORK
aws_secret_access_key=   ` + awsTestSecret + `   
aws_session_token = ` + awsTestToken + `

[sso-user]
sso_start_url = https://example.awsapps.com/start
sso_role_name = Dev

[proc]
credential_process = /usr/local/bin/creds --json

[role]
role_arn = arn:aws:iam::123456789012:role/x
source_profile = default
aws_access_key_id = AKIDROLE
aws_secret_access_key = ` + awsTestSecret + `

[half]
aws_access_key_id = AKIDHALF
`

const awsTestConfig = `[default]
region = us-east-1
s3 =
  max_concurrent_requests = 10
  region = not-a-region

[profile work]
region = eu-west-3
output = json

[profile conf-only]
region = ap-south-1
aws_access_key_id = AKIDCONF
aws_secret_access_key = ` + awsTestSecret + `
`

func TestAWSConfigResolution(t *testing.T) {
	for _, tc := range []struct {
		name            string
		env             map[string]string
		profile, region string
		wantKey         string
		wantToken       string
		wantRegion      string
		wantProfile     string
	}{
		{name: "default profile from files", wantKey: "AKIDDEFAULT", wantRegion: "us-east-1", wantProfile: "default"},
		{name: "flag profile, token, config region", profile: "work", wantKey: "AKIDWORK", wantToken: awsTestToken, wantRegion: "eu-west-3", wantProfile: "work"},
		{name: "AWS_PROFILE", env: map[string]string{"AWS_PROFILE": "work"}, wantKey: "AKIDWORK", wantToken: awsTestToken, wantRegion: "eu-west-3", wantProfile: "work"},
		{name: "flag profile beats AWS_PROFILE", env: map[string]string{"AWS_PROFILE": "work"}, profile: "default", wantKey: "AKIDDEFAULT", wantRegion: "us-east-1", wantProfile: "default"},
		{name: "keys in the config file", profile: "conf-only", wantKey: "AKIDCONF", wantRegion: "ap-south-1", wantProfile: "conf-only"},
		{name: "environment keys",
			env:     map[string]string{"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": awsTestSecret, "AWS_SESSION_TOKEN": awsTestToken, "AWS_PROFILE": "work"},
			wantKey: "AKIDENV", wantToken: awsTestToken, wantRegion: "eu-west-3", wantProfile: "work"},
		{name: "explicit profile beats environment keys",
			env:     map[string]string{"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": awsTestSecret},
			profile: "work", wantKey: "AKIDWORK", wantToken: awsTestToken, wantRegion: "eu-west-3", wantProfile: "work"},
		{name: "AWS_REGION beats AWS_DEFAULT_REGION and config",
			env:     map[string]string{"AWS_REGION": "sa-east-1", "AWS_DEFAULT_REGION": "ca-central-1"},
			wantKey: "AKIDDEFAULT", wantRegion: "sa-east-1", wantProfile: "default"},
		{name: "AWS_DEFAULT_REGION beats config", env: map[string]string{"AWS_DEFAULT_REGION": "ca-central-1"},
			wantKey: "AKIDDEFAULT", wantRegion: "ca-central-1", wantProfile: "default"},
		{name: "flag region beats all", env: map[string]string{"AWS_REGION": "sa-east-1"}, region: "us-gov-west-1",
			wantKey: "AKIDDEFAULT", wantRegion: "us-gov-west-1", wantProfile: "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			awsTestHome(t, awsTestCredentials, awsTestConfig)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cfg, err := loadAWSConfig(tc.profile, tc.region, os.LookupEnv)
			if err != nil {
				t.Fatal(err)
			}
			c := cfg.Credentials
			if c.AccessKeyID != tc.wantKey || c.SecretAccessKey != awsTestSecret || c.SessionToken != tc.wantToken ||
				cfg.Region != tc.wantRegion || cfg.Profile != tc.wantProfile {
				t.Errorf("got key %q token %q region %q profile %q (secret ok: %v), want key %q token %q region %q profile %q",
					c.AccessKeyID, c.SessionToken, cfg.Region, cfg.Profile, c.SecretAccessKey == awsTestSecret,
					tc.wantKey, tc.wantToken, tc.wantRegion, tc.wantProfile)
			}
			if printed := fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg); strings.Contains(printed, awsTestSecret) ||
				tc.wantToken != "" && strings.Contains(printed, tc.wantToken) {
				t.Errorf("printed config shows a secret: %s", printed)
			}
		})
	}
}

// TestAWSConfigFileVariables: AWS_SHARED_CREDENTIALS_FILE and
// AWS_CONFIG_FILE replace the files in the home directory.
func TestAWSConfigFileVariables(t *testing.T) {
	awsTestHome(t, awsTestCredentials, awsTestConfig)
	dir := t.TempDir()
	cred := filepath.Join(dir, "creds.ini")
	conf := filepath.Join(dir, "conf.ini")
	os.WriteFile(cred, []byte("[ci]\naws_access_key_id=AKIDCI\naws_secret_access_key="+awsTestSecret+"\n"), 0o600)
	os.WriteFile(conf, []byte("[profile ci]\nregion=eu-north-1\n"), 0o600)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", cred)
	t.Setenv("AWS_CONFIG_FILE", conf)
	cfg, err := loadAWSConfig("ci", "", os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Credentials.AccessKeyID != "AKIDCI" || cfg.Region != "eu-north-1" {
		t.Errorf("got key %q region %q, want AKIDCI eu-north-1", cfg.Credentials.AccessKeyID, cfg.Region)
	}
	if _, err := loadAWSConfig("work", "", os.LookupEnv); err == nil || !strings.Contains(err.Error(), cred) {
		t.Errorf("profile only in the home files: err = %v, want not found in %s", err, cred)
	}
}

// TestAWSConfigErrors: each failure says what to fix, and no error text
// holds a secret or a session token, even when the files are malformed.
func TestAWSConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, credentials, config string
		env                       map[string]string
		profile                   string
		want                      []string
	}{
		{name: "nothing at all", want: []string{"no AWS credentials", "AWS_ACCESS_KEY_ID", "[default]"}},
		{name: "unknown profile", credentials: awsTestCredentials, config: awsTestConfig, profile: "nope", want: []string{`"nope"`, "not found"}},
		{name: "unknown AWS_PROFILE", credentials: awsTestCredentials, env: map[string]string{"AWS_PROFILE": "gone"}, want: []string{`"gone"`, "not found"}},
		{name: "sso", credentials: awsTestCredentials, profile: "sso-user", want: []string{"sso_", "not supported"}},
		{name: "credential_process", credentials: awsTestCredentials, profile: "proc", want: []string{"credential_process", "not supported"}},
		{name: "role_arn even with keys", credentials: awsTestCredentials, profile: "role", want: []string{"role_arn", "not supported"}},
		{name: "half a key", credentials: awsTestCredentials, config: awsTestConfig, profile: "half", want: []string{"aws_secret_access_key"}},
		{name: "env key without secret", env: map[string]string{"AWS_ACCESS_KEY_ID": "AKIDENV"}, want: []string{"AWS_SECRET_ACCESS_KEY is not"}},
		{name: "env secret without key", env: map[string]string{"AWS_SECRET_ACCESS_KEY": awsTestSecret}, want: []string{"AWS_ACCESS_KEY_ID is not"}},
		{name: "no region anywhere", credentials: "[default]\naws_access_key_id=A\naws_secret_access_key=" + awsTestSecret + "\n", want: []string{"no AWS region", "--aws-region"}},
		{name: "malformed line", credentials: "[default]\naws_access_key_id A\naws_secret_access_key " + awsTestSecret + "\n", want: []string{"credentials:2", "key = value"}},
		{name: "setting outside a section", credentials: "aws_secret_access_key=" + awsTestSecret + "\n", want: []string{"credentials:1", "outside"}},
		{name: "bad section", config: "[profile x\naws_session_token=" + awsTestToken + "\n", want: []string{"config:1", "section"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			awsTestHome(t, tc.credentials, tc.config)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := loadAWSConfig(tc.profile, "", os.LookupEnv)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), awsTestSecret) || strings.Contains(err.Error(), awsTestToken) {
				t.Errorf("error shows a secret: %v", err)
			}
		})
	}
}

// TestAWSConfigSignsRequest: what loadAWSConfig returns is what signSigV4
// takes, end to end.
func TestAWSConfigSignsRequest(t *testing.T) {
	awsTestHome(t, awsTestCredentials, awsTestConfig)
	cfg, err := loadAWSConfig("work", "", os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, "https://api.example.com/cloud/environment/e/direct/register", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if err := signSigV4(req, []byte(`{}`), cfg.Credentials, cfg.Region, "", sigv4SuiteTime); err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("Authorization"); !strings.Contains(got, "Credential=AKIDWORK/20150830/eu-west-3/execute-api/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,") {
		t.Errorf("Authorization = %q", got)
	}
}
