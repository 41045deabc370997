package icconfig

import (
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"
)

// ParseConfigMap reads a Kube-OVN user's ovn-ic-config file (`kubectl get cm -n kube-system
// ovn-ic-config -o yaml`, or the manifest they apply): a ConfigMap, in YAML or JSON, named
// ConfigMapName, whose data Parse reads. Another kind or name is refused: a file of another
// ConfigMap would otherwise be read as an interconnection configuration with every key unknown
// or missing.
func ParseConfigMap(file []byte) (Config, error) {
	var cm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name, Namespace string
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(file, &cm); err != nil {
		return Config{}, fmt.Errorf("reading the %s file: %w", ConfigMapName, err)
	}
	if cm.Kind != "ConfigMap" || cm.APIVersion != "v1" {
		return Config{}, fmt.Errorf("the %s file holds a %s %s, not a v1 ConfigMap", ConfigMapName, cm.APIVersion, cm.Kind)
	}
	if cm.Metadata.Name != ConfigMapName {
		return Config{}, fmt.Errorf("the file's ConfigMap is %q, not %s (Kube-OVN's interconnection configuration)", cm.Metadata.Name, ConfigMapName)
	}
	if len(cm.Data) == 0 {
		return Config{}, errors.New("the " + ConfigMapName + " file has no data")
	}
	return Parse(cm.Data)
}
