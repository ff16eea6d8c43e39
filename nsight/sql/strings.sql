-- Resolve StringIds ids; :ids is a JSON array of ints (a list bound as one parameter).
-- requires: StringIds
SELECT id, value
FROM StringIds
WHERE id IN (SELECT value FROM json_each(:ids))
