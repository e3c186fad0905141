package main

// AWS credentials and region for --aws-sigv4, found the way the AWS SDKs
// find static ones: environment variables, then the shared credentials and
// config files of the chosen profile.
//
//	profile      --aws-profile, else AWS_PROFILE, else "default"
//	credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
//	             unless --aws-profile was given (an explicit profile wins, as in the AWS CLI);
//	             else aws_access_key_id / aws_secret_access_key / aws_session_token of the profile:
//	               AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, section [NAME]
//	               AWS_CONFIG_FILE or ~/.aws/config, section [profile NAME] ([default] for default)
//	             a key in the credentials file wins over the same key in the config file
//	region       --aws-region, else AWS_REGION, else AWS_DEFAULT_REGION,
//	             else region of the profile in the config file
//
// Only static keys are supported. A profile that would make an SDK run a
// process, use SSO, or assume a role is refused with an error naming the
// key, rather than signed with keys the SDK would not have used.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// awsConfig is what signing needs: credentials and a region, with where
// they came from for messages (CredentialSource names a variable or a
// file, never a value).
type awsConfig struct {
	Credentials      awsCredentials
	Region           string
	Profile          string
	CredentialSource string
}

// loadAWSConfig resolves credentials and region. profile and region are
// the command-line values ("" when not given); env looks variables up
// (os.LookupEnv in production, a map in tests). Errors name variables,
// files, profiles and keys, never a secret.
func loadAWSConfig(profile, region string, env func(string) (string, bool)) (awsConfig, error) {
	get := func(k string) string {
		v, _ := env(k)
		return strings.TrimSpace(v)
	}
	profile, explicitProfile := awsProfileName(profile, get)
	credPath, confPath := awsFilePaths(get)
	prof, err := readAWSProfile(profile, credPath, confPath)
	if err != nil {
		return awsConfig{}, err
	}
	cfg := awsConfig{Profile: profile, Region: awsRegion(region, get, prof.region)}

	// --aws-profile names the profile to use; the environment's keys do not override it.
	if !explicitProfile {
		c, ok, err := awsEnvCredentials(get)
		if err != nil {
			return awsConfig{}, err
		}
		if ok {
			cfg.Credentials = c
			cfg.CredentialSource = "environment (AWS_ACCESS_KEY_ID)"
			return cfg, cfg.needRegion()
		}
	}

	c, err := prof.credentials(explicitProfile, describeAWSFiles(credPath, confPath))
	if err != nil {
		return awsConfig{}, err
	}
	cfg.Credentials = c
	cfg.CredentialSource = "profile " + profile
	return cfg, cfg.needRegion()
}

// awsProfileName is the profile to use: the flag's, else AWS_PROFILE, else
// "default"; explicit is whether the flag gave it.
func awsProfileName(flag string, get func(string) string) (name string, explicit bool) {
	name = flag
	if name == "" {
		name = get("AWS_PROFILE")
	}
	if name == "" {
		name = "default"
	}
	return name, flag != ""
}

// awsFilePaths are the shared credentials and config files: the variables'
// paths, else those under the home directory. Without a home directory there
// are no default files ("" each); the environment's keys may still do.
func awsFilePaths(get func(string) string) (credPath, confPath string) {
	home := get("HOME")
	if home == "" {
		home = get("USERPROFILE")
	}
	credPath, confPath = get("AWS_SHARED_CREDENTIALS_FILE"), get("AWS_CONFIG_FILE")
	if credPath == "" && home != "" {
		credPath = filepath.Join(home, ".aws", "credentials")
	}
	if confPath == "" && home != "" {
		confPath = filepath.Join(home, ".aws", "config")
	}
	return credPath, confPath
}

// awsProfile is one profile as the shared files give it.
type awsProfile struct {
	name     string
	settings map[string]string // the credentials file's keys over the config file's
	found    bool              // whether either file has the profile
	region   string            // the region of the config file's section
}

// readAWSProfile reads the profile's sections of the two files: [NAME] of
// the credentials file, [profile NAME] of the config file ([default] for
// default when there is no [profile default]).
func readAWSProfile(name, credPath, confPath string) (awsProfile, error) {
	credFile, err := readAWSINI(credPath)
	if err != nil {
		return awsProfile{}, err
	}
	confFile, err := readAWSINI(confPath)
	if err != nil {
		return awsProfile{}, err
	}
	confSection := "profile " + name
	if _, ok := confFile[confSection]; !ok && name == "default" {
		confSection = "default"
	}
	p := awsProfile{name: name, settings: map[string]string{}, region: confFile[confSection]["region"]}
	// The credentials file wins over the config file, key by key.
	for _, sec := range []map[string]string{confFile[confSection], credFile[name]} {
		if sec != nil {
			p.found = true
		}
		for k, v := range sec {
			p.settings[k] = v
		}
	}
	return p, nil
}

// awsRegion is the flag's region, else AWS_REGION, else AWS_DEFAULT_REGION,
// else the profile's.
func awsRegion(flag string, get func(string) string, profileRegion string) string {
	for _, r := range []string{flag, get("AWS_REGION"), get("AWS_DEFAULT_REGION")} {
		if r != "" {
			return r
		}
	}
	return profileRegion
}

// awsEnvCredentials are the environment's keys; ok is false when neither
// key variable is set, and only one of them set is an error.
func awsEnvCredentials(get func(string) string) (c awsCredentials, ok bool, err error) {
	akid, secret := get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")
	switch {
	case akid != "" && secret != "":
		return awsCredentials{AccessKeyID: akid, SecretAccessKey: secret, SessionToken: get("AWS_SESSION_TOKEN")}, true, nil
	case akid != "":
		return awsCredentials{}, false, errors.New("aws credentials: AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not")
	case secret != "":
		return awsCredentials{}, false, errors.New("aws credentials: AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not")
	}
	return awsCredentials{}, false, nil
}

// credentials are the profile's static keys. where describes the files for
// messages; explicit is whether --aws-profile named the profile.
func (p awsProfile) credentials(explicit bool, where string) (awsCredentials, error) {
	if !p.found {
		if p.name == "default" && !explicit {
			return awsCredentials{}, fmt.Errorf("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add a [default] profile to %s", where)
		}
		return awsCredentials{}, fmt.Errorf("aws profile %q not found in %s", p.name, where)
	}
	// role_arn applies even over static keys in the same profile (they would be its source).
	if _, ok := p.settings["role_arn"]; ok {
		return awsCredentials{}, fmt.Errorf("aws profile %q: role_arn (assume role) is not supported; use static keys", p.name)
	}
	c := awsCredentials{
		AccessKeyID:     p.settings["aws_access_key_id"],
		SecretAccessKey: p.settings["aws_secret_access_key"],
		SessionToken:    p.settings["aws_session_token"],
	}
	if c.AccessKeyID != "" && c.SecretAccessKey != "" {
		return c, nil
	}
	// Keys that pick a source other than static keys; an SDK would use them here.
	for _, k := range []string{
		"credential_process", "credential_source", "web_identity_token_file",
		"sso_session", "sso_start_url", "sso_account_id", "sso_role_name", "sso_region",
	} {
		if _, ok := p.settings[k]; ok {
			return awsCredentials{}, fmt.Errorf("aws profile %q: %s is not supported; use static keys (aws_access_key_id, aws_secret_access_key)", p.name, k)
		}
	}
	missing := "aws_access_key_id"
	if c.AccessKeyID != "" {
		missing = "aws_secret_access_key"
	}
	return awsCredentials{}, fmt.Errorf("aws profile %q has no %s in %s", p.name, missing, where)
}

func (c awsConfig) needRegion() error {
	if c.Region == "" {
		return fmt.Errorf("no AWS region: pass --aws-region, set AWS_REGION, or set region in profile %q of the config file", c.Profile)
	}
	return nil
}

func describeAWSFiles(credPath, confPath string) string {
	switch {
	case credPath == "" && confPath == "":
		return "the shared AWS files (no home directory to find them in)"
	case credPath == "":
		return confPath
	case confPath == "":
		return credPath
	}
	return credPath + " or " + confPath
}

// readAWSINI reads a shared credentials or config file into sections of
// lower-cased keys. A missing file (or path "") is an empty one, as for the
// SDKs. Errors give the file and line, not the line's text, which may hold
// a secret.
func readAWSINI(path string) (map[string]map[string]string, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	return parseAWSINI(path, data)
}

// parseAWSINI parses the INI dialect of the AWS files: [section] headers,
// key = value lines, full-line comments starting with # or ;, blank lines.
// Values are taken whole (a secret may hold any character). Indented lines
// under a key with an empty value are that key's sub-settings (as
// "s3 =\n  max_concurrent_requests = 10") and are skipped, as they never
// hold credentials. Later sections and keys of the same name win.
func parseAWSINI(path string, data []byte) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	var sec map[string]string
	nested := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		if n == 1 {
			raw = strings.TrimPrefix(raw, "\ufeff")
		}
		line := strings.TrimSpace(raw)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			name := ""
			if end > 0 {
				name = strings.Join(strings.Fields(line[1:end]), " ")
			}
			if name == "" {
				return nil, fmt.Errorf("aws config %s:%d: malformed section header", path, n)
			}
			if out[name] == nil {
				out[name] = map[string]string{}
			}
			sec, nested = out[name], false
			continue
		}
		if nested && raw[0] != line[0] { // indented: a sub-setting of the key above
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("aws config %s:%d: expected key = value", path, n)
		}
		if sec == nil {
			return nil, fmt.Errorf("aws config %s:%d: setting outside any [section]", path, n)
		}
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		sec[k] = v
		nested = v == ""
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("aws config %s: %w", path, err)
	}
	return out, nil
}
