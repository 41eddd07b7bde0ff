-- Argo CD health check for autoscaling.modelsphere.dev/LLMScaler (docs/argocd/README.md).
-- Same shape as Argo CD's built-in keda.sh/ScaledObject check: Healthy when Ready is True,
-- Suspended while paused or advisory, Degraded when Ready is False for a fault or the
-- replicas are contested, Progressing otherwise (first sync, a guard deferring a scale-down,
-- a generation not synced yet, deletion).
local hs = {}
if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Pending deletion"
  if obj.metadata.finalizers ~= nil and #obj.metadata.finalizers > 0 then
    hs.message = "Pending deletion; blocked by finalizers: " .. table.concat(obj.metadata.finalizers, ", ")
  end
  return hs
end
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator's first sync"
  return hs
end
local ready = nil
local contested = nil
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Ready" then
    ready = condition
  elseif condition.type == "ReplicasContested" and condition.status == "True" then
    contested = condition
  end
end
if obj.status.paused ~= nil then
  hs.status = "Suspended"
  hs.message = "Paused by " .. tostring(obj.status.paused.by)
  return hs
end
if contested ~= nil then
  hs.status = "Degraded"
  hs.message = contested.message
  return hs
end
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator's first sync"
  return hs
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and ready.observedGeneration ~= nil and ready.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to sync generation " .. tostring(generation)
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message
  return hs
end
-- Guards that defer a scale-down on purpose: the scaler works, the change waits.
local deferred = { RolloutInProgress = true, ScaleDownNotSettled = true, Draining = true }
if ready.status == "False" and deferred[ready.reason] then
  hs.status = "Progressing"
  hs.message = ready.message
  return hs
end
if ready.status == "False" then
  hs.status = "Degraded"
  hs.message = ready.message
  return hs
end
hs.status = "Progressing"
hs.message = ready.message
return hs
