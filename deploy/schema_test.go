package deploy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// fields is the schema of a mapping: each key allowed and the schema of
// its value — nil for any value, fields for a mapping, listOf for a list.
// It holds the parts of the Kubernetes API the manifests use, so that a
// misspelt field (which kubectl would reject, or a lenient tool silently
// drop) fails the test without the Kubernetes API module.
type fields map[string]any

// listOf is the schema of a list whose items all have schema of.
type listOf struct{ of any }

var (
	metaFields = fields{"name": nil, "namespace": nil, "labels": nil, "annotations": nil}
	probe      = fields{
		"httpGet":             fields{"path": nil, "port": nil, "scheme": nil},
		"tcpSocket":           fields{"port": nil},
		"grpc":                fields{"port": nil, "service": nil},
		"initialDelaySeconds": nil, "periodSeconds": nil, "timeoutSeconds": nil,
		"failureThreshold": nil, "successThreshold": nil,
	}
	seccomp   = fields{"type": nil}
	container = fields{
		"name": nil, "image": nil, "imagePullPolicy": nil, "args": nil, "command": nil,
		"env":            listOf{fields{"name": nil, "value": nil}},
		"ports":          listOf{fields{"name": nil, "containerPort": nil, "protocol": nil}},
		"readinessProbe": probe, "livenessProbe": probe, "startupProbe": probe,
		"resources": fields{"requests": fields{"cpu": nil, "memory": nil}, "limits": fields{"cpu": nil, "memory": nil}},
		"securityContext": fields{
			"allowPrivilegeEscalation": nil, "readOnlyRootFilesystem": nil, "runAsNonRoot": nil,
			"runAsUser": nil, "runAsGroup": nil, "capabilities": fields{"drop": nil, "add": nil}, "seccompProfile": seccomp,
		},
		"volumeMounts": listOf{fields{"name": nil, "mountPath": nil, "readOnly": nil, "subPath": nil}},
	}
	podSpec = fields{
		"terminationGracePeriodSeconds": nil,
		"securityContext":               fields{"runAsNonRoot": nil, "runAsUser": nil, "runAsGroup": nil, "fsGroup": nil, "seccompProfile": seccomp},
		"containers":                    listOf{container},
		"volumes":                       listOf{fields{"name": nil, "configMap": fields{"name": nil, "items": nil}, "emptyDir": nil}},
	}
	kustomizePatch = listOf{fields{"path": nil, "target": nil}}

	// schemas by apiVersion and kind.
	schemas = map[string]fields{
		"apps/v1 Deployment": {"apiVersion": nil, "kind": nil, "metadata": metaFields, "spec": fields{
			"replicas": nil, "selector": fields{"matchLabels": nil}, "strategy": nil,
			"template": fields{"metadata": metaFields, "spec": podSpec},
		}},
		"v1 Service": {"apiVersion": nil, "kind": nil, "metadata": metaFields, "spec": fields{
			"type": nil, "selector": nil,
			"ports": listOf{fields{"name": nil, "port": nil, "targetPort": nil, "protocol": nil, "appProtocol": nil}},
		}},
		"v1 ConfigMap": {"apiVersion": nil, "kind": nil, "metadata": metaFields, "data": nil},
		"kustomize.config.k8s.io/v1beta1 Kustomization": {"apiVersion": nil, "kind": nil,
			"resources": nil, "components": nil, "patches": kustomizePatch, "images": nil},
		"kustomize.config.k8s.io/v1alpha1 Component": {"apiVersion": nil, "kind": nil,
			"resources": nil, "patches": kustomizePatch},
	}
)

// checkSchema reports every key of v that schema does not allow, and
// every mapping or list where schema wants the other, by path.
func checkSchema(v any, schema any, path string) []string {
	switch s := schema.(type) {
	case fields:
		m, ok := v.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: got %T, want a mapping", path, v)}
		}
		var bad []string
		for k, sub := range m {
			want, known := s[k]
			if !known {
				bad = append(bad, fmt.Sprintf("%s.%s: unknown field", path, k))
				continue
			}
			bad = append(bad, checkSchema(sub, want, path+"."+k)...)
		}
		return bad
	case listOf:
		l, ok := v.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: got %T, want a list", path, v)}
		}
		var bad []string
		for i, item := range l {
			bad = append(bad, checkSchema(item, s.of, fmt.Sprintf("%s[%d]", path, i))...)
		}
		return bad
	}
	return nil
}

func TestManifestFields(t *testing.T) {
	for _, o := range loadManifests(t, kubeDir) {
		t.Run(o.String(), func(t *testing.T) {
			key := str(o.v, "apiVersion") + " " + o.kind()
			schema, ok := schemas[key]
			if !ok {
				t.Fatalf("got apiVersion and kind %q, want one of the known ones", key)
			}
			bad := checkSchema(o.v, schema, "")
			slices.Sort(bad)
			if len(bad) > 0 {
				t.Errorf("got\n%s", strings.Join(bad, "\n"))
			}
		})
	}
	// The check itself: a misspelt probe is caught.
	typo := map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"containers": []any{map[string]any{"name": "x", "readinesProbe": nil}}}}}}
	if got := checkSchema(typo, schemas["apps/v1 Deployment"], ""); len(got) != 1 || !strings.Contains(got[0], "readinesProbe: unknown field") {
		t.Errorf("a misspelt readinessProbe: got %q, want it reported", got)
	}
}
