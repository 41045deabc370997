package gather

import "regexp"

// Redacted replaces every value the archive must not hold.
const Redacted = "<redacted>"

// Secrets never enter an archive: no collector reads a Secret, and every byte written passes
// redactText. The structured pass (redactObject) catches what the text pass cannot see in
// an object's fields; the text pass catches what logs, kernel state and serialised objects
// carry in the forms credentials are written in.
var textRules = []struct {
	re   *regexp.Regexp
	repl string
}{
	// PEM private keys, whole blocks (a ConfigMap or a log can hold one).
	{regexp.MustCompile(`-----BEGIN ([A-Z ]*)PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`), "-----BEGIN ${1}PRIVATE KEY----- " + Redacted + " -----END ${1}PRIVATE KEY-----"},
	// JSON Web Tokens wherever they stand: every Kubernetes ServiceAccount token is one, the
	// join token and each cluster's hub credential included.
	{regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`), Redacted},
	// HTTP authorisation headers, as clients log them.
	{regexp.MustCompile(`(?i)(\bbearer[ \t]+)[A-Za-z0-9._~+/=-]{8,}`), "${1}" + Redacted},
	// key: value, key=value and "key":"value" for keys that name credentials, in YAML, JSON,
	// logfmt, WireGuard's configuration and UAPI forms (private_key=, PrivateKey = ). The key
	// must start a word, so serviceAccountToken and automountServiceAccountToken are not keys
	// of this kind; values that open a block ({ [ | >) or are empty are left for the
	// structured pass.
	{regexp.MustCompile(`(?i)(\b(?:token|bearer[_-]?token|access[_-]?token|refresh[_-]?token|id[_-]?token|private[_-]?key|client[_-]key[_-]data|password|passwd)["']?[ \t]*[:=][ \t]*["']?)([^\s"',}{\[|>][^\s"',}]*)`), "${1}" + Redacted},
}

// redactText applies textRules.
func redactText(b []byte) []byte {
	for _, r := range textRules {
		b = r.re.ReplaceAll(b, []byte(r.repl))
	}
	return b
}

// sensitiveKey matches field names and environment variable names whose values are
// credentials.
var sensitiveKey = regexp.MustCompile(`(?i)^(.*[_-])?(token|password|passwd|secret|private[_-]?key|client[_-]key[_-]data|credentials?|api[_-]?key)$`)

// redactObject redacts, in place, an object as the API returns it (unstructured): a Secret's
// data, string fields whose name is sensitive (token: ..., privateKey: ...), environment
// variables whose name is (env: [{name: DB_PASSWORD, value: ...}]), and the managed fields,
// which say nothing useful and double an object's size.
func redactObject(obj map[string]any) {
	if meta, ok := obj["metadata"].(map[string]any); ok {
		delete(meta, "managedFields")
	}
	if obj["kind"] == "Secret" {
		for _, k := range []string{"data", "stringData"} {
			if _, ok := obj[k]; ok {
				obj[k] = Redacted
			}
		}
	}
	redactValue(obj)
}

func redactValue(v any) {
	switch v := v.(type) {
	case map[string]any:
		if name, ok := v["name"].(string); ok && sensitiveKey.MatchString(name) {
			if _, ok := v["value"].(string); ok {
				v["value"] = Redacted
			}
		}
		for k, x := range v {
			if s, ok := x.(string); ok && s != "" && sensitiveKey.MatchString(k) {
				v[k] = Redacted
				continue
			}
			redactValue(x)
		}
	case []any:
		for _, x := range v {
			redactValue(x)
		}
	}
}
