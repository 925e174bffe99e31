-- Argo CD health of a ralph.dev Task (resource.customizations.health.ralph.dev_Task).
-- Healthy: Done. Degraded: Failed, Blocked. Progressing: Pending, Running, and anything
-- the controller has not yet observed.
local hs = { status = "Progressing", message = "Waiting for the ralph controller" }
if obj.status == nil or obj.status.phase == nil then
  return hs
end
local phase = obj.status.phase
hs.message = phase
if obj.status.attemptCount ~= nil and obj.status.attemptCount > 0 then
  hs.message = phase .. " after " .. obj.status.attemptCount .. " attempt(s)"
end
if obj.status.lastFailure ~= nil and obj.status.lastFailure ~= "" and phase ~= "Done" then
  hs.message = hs.message .. ": " .. obj.status.lastFailure
end
if phase == "Done" then
  hs.status = "Healthy"
elseif phase == "Failed" or phase == "Blocked" then
  hs.status = "Degraded"
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
