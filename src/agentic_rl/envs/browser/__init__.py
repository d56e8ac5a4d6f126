"""Web tasks in a real headless browser: MiniWoB++ pages driven by Selenium.

- `driver.py`: finding Chromium + chromedriver, and the pool of browsers reused across episodes
  (each episode a tab, reset by reloading its page; timeouts; a dead browser is restarted);
- `page.py`: the page as compact accessibility-like text with element ids, read from the DOM;
- `actions.py`: the action language (`click(3)`, `type(4, "text")`, `select(5, "option")`,
  `press("Enter")`, `scroll("down")`) parsed from the model's text;
- `experts.py`: scripted experts for five of the tasks, from the page and the task's utterance;
- `miniwob.py`: the env (`MiniWoBEnv`); `suite.py`: the task set and its generator
  (`make_miniwob_tasks`).

Selenium is imported only when a browser is first needed, so the package imports without it.
"""
