package gather

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// A made-up ServiceAccount token (header.payload.signature, base64url).
const jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IkFCQyJ9.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50In0.c2lnbmF0dXJlLW9mLWEtdG9rZW4tZm9yLXRlc3Rz"

func TestRedactText(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"yaml token", "token: abc.def-ghi\n", "token: <redacted>\n"},
		{"kubeconfig user", "users:\n- name: x\n  user:\n    token: s3cr3t\n    client-key-data: LS0tLS1CRUdJTg==\n", "users:\n- name: x\n  user:\n    token: <redacted>\n    client-key-data: <redacted>\n"},
		{"json", `{"token":"s3cr3t","privateKey": "k3y="}`, `{"token":"<redacted>","privateKey": "<redacted>"}`},
		{"logfmt", `level=info msg="joined" token=s3cr3t password=hunter2`, `level=info msg="joined" token=<redacted> password=<redacted>`},
		{"wireguard config and UAPI", "PrivateKey = yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\nprivate_key=e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a\n",
			"PrivateKey = <redacted>\nprivate_key=<redacted>\n"},
		{"jwt anywhere", "using credential " + jwt + " for the hub", "using credential <redacted> for the hub"},
		{"bearer", "Authorization: Bearer abcdefgh12345678", "Authorization: Bearer <redacted>"},
		{"pem", "key.pem: |\n  -----BEGIN EC PRIVATE KEY-----\n  MHcCAQEEIB\n  -----END EC PRIVATE KEY-----\n", "key.pem: |\n  -----BEGIN EC PRIVATE KEY----- <redacted> -----END EC PRIVATE KEY-----\n"},
		// What must stay: Kubernetes fields that only look like credentials.
		{"projected token volume", "- serviceAccountToken:\n    expirationSeconds: 3607\n    path: token\nautomountServiceAccountToken: true\n", "- serviceAccountToken:\n    expirationSeconds: 3607\n    path: token\nautomountServiceAccountToken: true\n"},
		{"public key and counts", "publicKey: yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\ntokens: 3\ntoken:\n", "publicKey: yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\ntokens: 3\ntoken:\n"},
		{"certificate", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(redactText([]byte(tt.in))); got != tt.want {
				t.Errorf("redactText:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestRedactObject(t *testing.T) {
	var obj map[string]any
	in := `
apiVersion: v1
kind: Pod
metadata:
  name: p
  managedFields: [{manager: kubectl}]
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"spec":{"token":"s3cr3t"}}'
spec:
  containers:
  - name: c
    env:
    - {name: HUB_TOKEN, value: s3cr3t}
    - {name: DB_PASSWORD, value: hunter2}
    - {name: CLUSTER_ID, value: east}
    - name: FROM_SECRET
      valueFrom: {secretKeyRef: {name: s, key: token}}
  volumes:
  - name: creds
    secret: {secretName: s}
  - name: projected
    projected: {sources: [{serviceAccountToken: {path: token, expirationSeconds: 3607}}]}
`
	if err := yaml.Unmarshal([]byte(in), &obj); err != nil {
		t.Fatal(err)
	}
	redactObject(obj)
	out := string(redactText(objectsYAML(obj)))
	for _, gone := range []string{"s3cr3t", "hunter2", "managedFields", "kubectl\n"} {
		if strings.Contains(out, gone) {
			t.Errorf("%q survived:\n%s", gone, out)
		}
	}
	for _, kept := range []string{"value: east", "secretName: s", "key: token", "path: token", "serviceAccountToken:"} {
		if !strings.Contains(out, kept) {
			t.Errorf("%q was lost:\n%s", kept, out)
		}
	}

	secret := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"},
		"data": map[string]any{"ca.crt": "Q0E=", "anything": "c2VjcmV0"}, "stringData": map[string]any{"x": "y"}}
	redactObject(secret)
	if secret["data"] != Redacted || secret["stringData"] != Redacted {
		t.Errorf("a Secret's data survived: %v", secret)
	}
}
