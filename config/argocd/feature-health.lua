-- Argo CD health of a ralph.dev Feature (resource.customizations.health.ralph.dev_Feature).
-- Healthy: Complete, or NoPlan (nothing to do). Degraded: Failed, Blocked, Invalid,
-- LimitReached, Halted. Suspended: Suspended, and AwaitingApproval (a plan waits for a
-- person). Progressing: anything else, and while the
-- controller has not yet observed the latest spec.
local hs = { status = "Progressing", message = "Waiting for the ralph controller" }
if obj.status == nil or obj.status.phase == nil then
  return hs
end
local generation = obj.metadata and obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.message = "Waiting for the ralph controller to observe generation " .. generation
  return hs
end
local phase = obj.status.phase
local counts = obj.status.counts or {}
local summary = phase .. ": " .. (counts.done or 0) .. "/" .. (counts.total or 0) .. " tasks done"
if obj.status.message ~= nil and obj.status.message ~= "" then
  summary = summary .. " (" .. obj.status.message .. ")"
end
hs.message = summary
if phase == "Complete" or phase == "NoPlan" then
  hs.status = "Healthy"
elseif phase == "Failed" or phase == "Blocked" or phase == "Invalid" or phase == "LimitReached"
    or phase == "Halted" then
  hs.status = "Degraded"
elseif phase == "Suspended" or phase == "AwaitingApproval" then
  hs.status = "Suspended"
end
-- A configuration problem the user must fix (Configured=False: no agent image, Pod
-- refused, agent misconfigured, unsupported setting) is Degraded whatever the phase.
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Configured" and c.status == "False" then
      hs.status = "Degraded"
      hs.message = c.reason .. ": " .. (c.message or "")
    end
  end
end
return hs
