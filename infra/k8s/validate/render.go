// Package validate renders the kustomize targets under infra/k8s and checks them against the
// Kubernetes API types and loopwire's own deployment invariants.
package validate

import (
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Render runs kustomize on dir (a directory holding kustomization.yaml), as `kubectl kustomize` would.
func Render(dir string) (resmap.ResMap, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	return k.Run(filesys.MakeFsOnDisk(), dir)
}
