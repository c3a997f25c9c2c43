-- The v16 data step: a child session that is neither a /branch nor a
-- compression continuation is a delegated subagent run. Tag it with
-- "_delegate_from": <parent id> in model_config so that it stays ephemeral
-- whatever later happens to its parent. model_config text that is not a
-- JSON object is left as it is.
--
-- Hermes also tags a child of a parent that ended with 'compression' or
-- 'branched' when it started before that end (a clock stepped back); 0005
-- takes such tags away again. They are not written here at all: adding a tag
-- and removing it rewrote the child's model_config (JSON text compacted,
-- '{}' made NULL), and a continuation's model_config is not touched.
UPDATE sessions
SET model_config = json_set(COALESCE(model_config, '{}'), '$._delegate_from', parent_session_id)
WHERE parent_session_id IS NOT NULL
  AND (CASE
         WHEN model_config IS NULL THEN 1
         WHEN json_valid(model_config) AND json_type(model_config) = 'object'
           THEN json_extract(model_config, '$._delegate_from') IS NULL
                AND json_extract(model_config, '$._branched_from') IS NULL
         ELSE 0
       END)
  AND NOT EXISTS (
      SELECT 1 FROM sessions AS p
      WHERE p.id = sessions.parent_session_id
        AND p.end_reason IN ('branched', 'compression')
  );
